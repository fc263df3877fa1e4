//! Outbound HTTP of tasks (issue 30) through a real `sutra serve` and a
//! local HTTP server on loopback: grants at deploy, a granted call recorded,
//! denials (host, address, secret, the request cap) recorded with
//! `SUTRA.TASK.EGRESS_DENIED`, loopback denied by default (also through a
//! name resolving to 127.0.0.1: `sutra.egress.static-hosts` stands in for the
//! resolver), a redirect not followed, secrets only on their bound host and
//! nowhere else, the response cap. SQLite and PostgreSQL.

mod common;
#[path = "common/server.rs"]
mod server;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::response::IntoResponse;
use axum::routing::any;
use axum::Router;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::{Db, Server};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const SECRET_VALUE: &str = "s3cr3t-value-7f2a";

fn definition() -> String {
    r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="call" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:fetch"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
        .to_string()
}

/// One request the local API received.
#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    body: Vec<u8>,
}

/// The local API on 127.0.0.1: `/echo` answers the header names it got,
/// `/redirect` a 302 to the metadata address, `/big` 64 KiB, `/hang-once`
/// never answers the first request it gets.
struct Api {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn handle(
    State(seen): State<Arc<Mutex<Vec<Seen>>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let path = uri.path().to_string();
    let n = {
        let mut seen = seen.lock().unwrap();
        seen.push(Seen {
            headers: headers.clone(),
            body: body.to_vec(),
        });
        seen.len()
    };
    match path.as_str() {
        // The first request ever made hangs (the server is killed meanwhile).
        "/hang-once" if n == 1 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "late".into_response()
        }
        "/redirect" => (
            AxStatus::FOUND,
            [("location", "http://169.254.169.254/latest/meta-data/")],
            "",
        )
            .into_response(),
        "/big" => "x".repeat(64 * 1024).into_response(),
        _ => {
            let names: Vec<String> = headers.keys().map(|k| k.to_string()).collect();
            axum::Json(json!({ "path": path, "header_names": names })).into_response()
        }
    }
}

impl Api {
    async fn start() -> Api {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = Router::new().fallback(any(handle)).with_state(seen.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Api { port, seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls the instance (at most 60 s) until it is no longer RUNNING.
async fn settled(api: &server::Api, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = api.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let state = body["state"].as_str().unwrap_or_default().to_string();
        if state == "COMPLETED" || state == "FAILED" {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "instance {id} stayed {state}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sets the secret `token` to [`SECRET_VALUE`].
async fn set_token(tenant: &server::Api) {
    let (status, body) = tenant
        .call(
            Method::PUT,
            "/v1/secrets/token",
            Some(json!({ "value": SECRET_VALUE })),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// Deploy `fetch` (granted first with `rules`), start it with `input`, wait.
async fn run(tenant: &server::Api, rules: Value, input: Value) -> (Value, Vec<Value>) {
    run_guest(tenant, "fetch", rules, input).await
}

/// [`run`] with the example guest `guest` playing the module `fetch`.
async fn run_guest(
    tenant: &server::Api,
    guest: &str,
    rules: Value,
    input: Value,
) -> (Value, Vec<Value>) {
    let (status, body) = tenant
        .call(
            Method::PUT,
            "/v1/egress/fetch",
            Some(json!({ "allow": rules })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = tenant
        .deploy(&definition(), &[("fetch", common::guest_bytes(guest))])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, started) = tenant.start("call", input).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = instance_id(&started);
    let done = settled(tenant, &id).await;
    let (status, attempts) = tenant.get(&format!("/v1/instances/{id}/attempts")).await;
    assert_eq!(status, StatusCode::OK, "{attempts}");
    let calls = attempts["attempts"][0]["calls"]["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (done, calls)
}

fn instance_id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap_or_else(|| panic!("no id in {v}"))
        .to_string()
}

fn backends() -> [Db; 2] {
    [Db::Sqlite, Db::Postgres]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_calling_out_needs_a_grant_and_a_granted_call_is_recorded() {
    for db in backends() {
        let Some(srv) =
            Server::start_on(db, &[("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32")]).await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        // No grant: refused at deploy, naming the import and the grant.
        let (status, body) = acme
            .deploy(&definition(), &[("fetch", common::guest_bytes("fetch"))])
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["code"], "SUTRA.TASK.MODULE_INVALID", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("wasi:http/"), "{message}");
        assert!(message.contains("egress grant"), "{message}");
        // A grant outside the ceiling's syntax is refused.
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/egress/fetch",
                Some(json!({"allow": [{"host": "127.0.0.1"}]})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        let (done, calls) = run(
            &acme,
            json!([{ "host": format!("http://127.0.0.1:{}", api.port), "methods": ["GET"] }]),
            json!({ "url": api.url("127.0.0.1", "/echo?q=1") }),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let seen = api.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let key = seen[0]
            .headers
            .get("idempotency-key")
            .expect("the task's Idempotency-Key");
        assert!(!key.is_empty());
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0]["method"], "GET");
        assert_eq!(calls[0]["host"], "127.0.0.1");
        assert_eq!(calls[0]["path"], "/echo", "no query in the record");
        assert_eq!(calls[0]["status"], 200);
        assert!(calls[0]["bytes_in"].as_u64().unwrap() > 0);
        assert!(calls[0].get("code").is_none(), "{calls:?}");
        // The instance view and `sutra inspect` list the attempt's calls too.
        assert_eq!(
            done["attempts"][0]["calls"]["calls"][0]["path"], "/echo",
            "{done}"
        );
        let token = acme.token.clone().unwrap();
        let shown = ok(&sutra(&srv, &token, &["inspect", &instance_id(&done)], ""));
        assert!(
            shown.contains(&format!(
                "call GET http://127.0.0.1:{}/echo  -> 200",
                api.port
            )),
            "{shown}"
        );

        // The grant lists the rule; another host is not granted: denied and recorded.
        let (_, listed) = acme.get("/v1/egress").await;
        assert_eq!(listed["grants"][0]["module"], "fetch", "{listed}");
        let (done, calls) = run(
            &acme,
            json!([{ "host": format!("http://127.0.0.1:{}", api.port) }]),
            json!({ "url": format!("http://127.0.0.1:{}/echo", api.port + 1) }),
        )
        .await;
        assert_eq!(done["state"], "FAILED", "{done}");
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0]["code"], "SUTRA.TASK.EGRESS_DENIED");
        assert!(
            calls[0]["reason"]
                .as_str()
                .unwrap()
                .contains("host not granted"),
            "{calls:?}"
        );
        assert_eq!(api.seen().len(), 1, "the denied request never went out");
        let (_, attempts) = acme
            .get(&format!("/v1/instances/{}/attempts", instance_id(&done)))
            .await;
        assert_eq!(
            attempts["attempts"][0]["code"], "SUTRA.TASK.EGRESS_DENIED",
            "{attempts}"
        );
        assert_eq!(
            attempts["attempts"][0]["class"], "invalid_input",
            "{attempts}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_denied_by_default_also_through_a_name() {
    for db in backends() {
        let Some(srv) =
            Server::start_on(db, &[("SUTRA_EGRESS_STATIC_HOSTS", "api.test=127.0.0.1")]).await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        let (done, calls) = run(
            &acme,
            json!([
                { "host": format!("http://127.0.0.1:{}", api.port) },
                { "host": format!("http://api.test:{}", api.port) },
            ]),
            json!({ "requests": [
                { "url": api.url("127.0.0.1", "/echo") },
                { "url": api.url("api.test", "/echo") },
            ]}),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert!(api.seen().is_empty(), "{:?}", api.seen());
        assert_eq!(calls.len(), 2, "{calls:?}");
        for c in &calls {
            assert_eq!(c["code"], "SUTRA.TASK.EGRESS_DENIED", "{c}");
            let reason = c["reason"].as_str().unwrap();
            assert!(
                reason.contains("address denied") && reason.contains("loopback"),
                "{reason}"
            );
        }
        assert_eq!(calls[1]["host"], "api.test");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_and_its_target_is_checked_again() {
    for db in backends() {
        let Some(srv) =
            Server::start_on(db, &[("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32")]).await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        let (done, calls) = run(
            &acme,
            json!([
                { "host": format!("http://127.0.0.1:{}", api.port) },
                { "host": "http://169.254.169.254" },
            ]),
            json!({ "requests": [
                { "url": api.url("127.0.0.1", "/redirect") },
                { "url": "http://169.254.169.254/latest/meta-data/" },
            ]}),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0]["status"], 302, "the guest sees the 3xx: {calls:?}");
        assert_eq!(calls[1]["code"], "SUTRA.TASK.EGRESS_DENIED");
        assert!(
            calls[1]["reason"].as_str().unwrap().contains("link-local"),
            "{calls:?}"
        );
        assert_eq!(api.seen().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_only_its_bound_host_and_nothing_else_sees_it() {
    for db in backends() {
        let Some(mut srv) = Server::start_on(
            db,
            &[
                ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
                ("SUTRA_EGRESS_STATIC_HOSTS", "other.test=127.0.0.1"),
                ("SUTRA_SECRET_KEY", SECRET_KEY),
            ],
        )
        .await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/secrets/token",
                Some(json!({ "value": SECRET_VALUE })),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        assert_eq!(
            body,
            Value::String(String::new()),
            "write-only: nothing answered"
        );
        let (_, listed) = acme.get("/v1/secrets").await;
        assert_eq!(listed["secrets"][0]["name"], "token", "{listed}");
        let auth = json!({ "authorization": "Bearer {{secret:token}}" });
        let (done, calls) = run(
            &acme,
            json!([
                { "host": format!("http://127.0.0.1:{}", api.port), "secrets": ["token"] },
                { "host": format!("http://other.test:{}", api.port) },
            ]),
            json!({ "requests": [
                { "url": api.url("127.0.0.1", "/echo"), "headers": auth },
                { "url": api.url("other.test", "/echo"), "headers": auth },
                { "url": api.url("127.0.0.1", "/echo?key={{secret:token}}") },
            ]}),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let seen = api.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(
            seen[0].headers.get("authorization").unwrap(),
            &format!("Bearer {SECRET_VALUE}"),
            "substituted on the wire to the bound host"
        );
        assert_eq!(calls[1]["code"], "SUTRA.TASK.EGRESS_DENIED");
        assert!(
            calls[1]["reason"]
                .as_str()
                .unwrap()
                .contains("secret not bound"),
            "{calls:?}"
        );
        // The guest saw only the placeholder; no view, log or metric holds the value.
        let id = &instance_id(&done);
        let everything = [
            acme.get(&format!("/v1/instances/{id}")).await.1.to_string(),
            acme.get(&format!("/v1/instances/{id}/attempts"))
                .await
                .1
                .to_string(),
            acme.get(&format!("/v1/instances/{id}/history"))
                .await
                .1
                .to_string(),
            acme.get("/v1/secrets").await.1.to_string(),
            srv.admin().get("/metrics").await.1.to_string(),
        ];
        for text in &everything {
            assert!(!text.contains(SECRET_VALUE), "the secret leaked: {text}");
        }
        assert!(everything[0].contains("{{secret:token}}") || everything[1].contains("/echo"));
        let log = srv.final_log();
        assert!(
            !log.contains(SECRET_VALUE),
            "the secret is in the server's log"
        );
    }
}

/// A placeholder in a request body is substituted on the wire (its
/// Content-Length corrected), and a secret sealed under an old key still
/// reaches its host after `SUTRA_SECRET_KEY` is rotated: read while the old
/// key is listed in `SUTRA_SECRET_PREVIOUS_KEYS`, re-sealed by `serve` at
/// start, then read with the new key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_placeholder_is_substituted_and_a_key_rotation_keeps_secrets() {
    const NEW_KEY: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    for db in backends() {
        let Some(srv) = Server::start_on(
            db,
            &[
                ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
                ("SUTRA_SECRET_KEY", SECRET_KEY),
            ],
        )
        .await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        set_token(&acme).await;
        let rules = json!([
            { "host": format!("http://127.0.0.1:{}", api.port), "secrets": ["token"] },
        ]);
        let input = json!({
            "url": api.url("127.0.0.1", "/echo"),
            "method": "POST",
            "body": "{\"token\": \"{{secret:token}}\", \"n\": 1}",
        });
        let expected = format!("{{\"token\": \"{SECRET_VALUE}\", \"n\": 1}}");
        let sent = |api: &Api, n: usize| {
            let seen = api.seen();
            assert_eq!(seen.len(), n, "{seen:?}");
            let last = seen.last().unwrap();
            assert_eq!(String::from_utf8_lossy(&last.body), expected);
            let length = last
                .headers
                .get("content-length")
                .map(|v| v.to_str().unwrap().to_string());
            assert_eq!(
                length,
                Some(expected.len().to_string()),
                "Content-Length of the substituted body"
            );
        };
        let (done, _) = run(&acme, rules.clone(), input.clone()).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        sent(&api, 1);
        let (_, attempts) = acme
            .get(&format!("/v1/instances/{}/attempts", instance_id(&done)))
            .await;
        assert!(!attempts.to_string().contains(SECRET_VALUE), "{attempts}");

        // Rotate: the new key, the old one listed as previous.
        let srv = srv
            .restart_with(
                &[
                    ("SUTRA_SECRET_KEY", NEW_KEY),
                    ("SUTRA_SECRET_PREVIOUS_KEYS", SECRET_KEY),
                ],
                "2030-01-01T00:01:00Z",
            )
            .await;
        let on = |srv: &Server| server::Api {
            base: srv.url.clone(),
            ..acme.clone()
        };
        let (done, _) = run(&on(&srv), rules.clone(), input.clone()).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        sent(&api, 2);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !srv.log().contains("re-sealed 1 secrets") {
            assert!(Instant::now() < deadline, "never re-sealed: {}", srv.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The old key gone: what was re-sealed still opens.
        let srv = srv
            .restart_without("SUTRA_SECRET_PREVIOUS_KEYS", "2030-01-01T00:02:00Z")
            .await;
        let (done, _) = run(&on(&srv), rules, input).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        sent(&api, 3);
        drop(srv);
    }
}

/// The JavaScript and Python examples (`guest-examples/js/fetch.js` with
/// componentize-js's `fetch()`, `guest-examples/py-fetch/app.py` with
/// componentize-py's wasi:http bindings) go out through the same host, under
/// the same grant, with the task's Idempotency-Key and the secret filled in;
/// an ungranted host is denied and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_and_python_tasks_call_an_api() {
    for guest in ["js-fetch", "py-fetch"] {
        guest_calls_an_api(guest).await;
    }
}

async fn guest_calls_an_api(guest: &str) {
    let Some(srv) = Server::start_on(
        Db::Sqlite,
        &[
            ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
            ("SUTRA_SECRET_KEY", SECRET_KEY),
        ],
    )
    .await
    else {
        return;
    };
    let acme = srv.tenant("acme", json!({})).await;
    let api = Api::start().await;
    set_token(&acme).await;
    let (done, calls) = run_guest(
        &acme,
        guest,
        json!([{ "host": format!("http://127.0.0.1:{}", api.port), "secrets": ["token"] }]),
        json!({
            "url": api.url("127.0.0.1", "/echo?from=js"),
            "method": "POST",
            "headers": { "authorization": "Bearer {{secret:token}}", "content-type": "application/json" },
            "body": "{\"n\": 1}",
        }),
    )
    .await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert_eq!(done["variables"]["status"], 200, "{done}");
    assert_eq!(done["variables"]["body"]["path"], "/echo", "{done}");
    let seen = api.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].headers.get("authorization").unwrap(),
        &format!("Bearer {SECRET_VALUE}")
    );
    assert!(seen[0].headers.get("idempotency-key").is_some());
    assert_eq!(String::from_utf8_lossy(&seen[0].body), "{\"n\": 1}");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["method"], "POST");
    assert_eq!(calls[0]["status"], 200);
    assert!(!done.to_string().contains(SECRET_VALUE));
    // Another host: denied by the host, a failure of the guest's own.
    let (done, calls) = run_guest(
        &acme,
        guest,
        json!([{ "host": format!("http://127.0.0.1:{}", api.port) }]),
        json!({ "url": format!("http://127.0.0.1:{}/echo", api.port + 1) }),
    )
    .await;
    assert_eq!(done["state"], "FAILED", "{guest}: {done}");
    assert_eq!(
        calls[0]["code"], "SUTRA.TASK.EGRESS_DENIED",
        "{guest}: {calls:?}"
    );
    assert_eq!(
        api.seen().len(),
        1,
        "{guest}: the denied request never went out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_response_cap_and_the_request_cap() {
    for db in backends() {
        let Some(srv) = Server::start_on(
            db,
            &[
                ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
                ("SUTRA_EGRESS_MAX_RESPONSE_BYTES", "1KiB"),
                ("SUTRA_EGRESS_MAX_REQUESTS", "2"),
            ],
        )
        .await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        let (done, calls) = run(
            &acme,
            json!([{ "host": format!("http://127.0.0.1:{}", api.port) }]),
            json!({ "requests": [
                { "url": api.url("127.0.0.1", "/big") },
                { "url": api.url("127.0.0.1", "/echo") },
                { "url": api.url("127.0.0.1", "/echo") },
            ]}),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(calls[0]["bytes_in"], 1024, "cut at the cap: {calls:?}");
        assert!(
            calls[0]["reason"]
                .as_str()
                .unwrap()
                .contains("max-response-bytes"),
            "{calls:?}"
        );
        assert_eq!(calls[1]["status"], 200);
        assert_eq!(calls[2]["code"], "SUTRA.TASK.EGRESS_DENIED");
        assert!(
            calls[2]["reason"].as_str().unwrap().contains("request cap"),
            "{calls:?}"
        );
        assert_eq!(api.seen().len(), 2);
    }
}

/// A kill -9 while an egress attempt waits for its answer: the attempt was
/// committed as started, so after the restart its park re-runs it, with the
/// same idempotency key; the counterpart sees that key on both requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_an_egress_attempt_retries_it_with_the_same_key() {
    for db in backends() {
        let Some(srv) =
            Server::start_on(db, &[("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32")]).await
        else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = Api::start().await;
        let rules = json!([{ "host": format!("http://127.0.0.1:{}", api.port) }]);
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/egress/fetch",
                Some(json!({ "allow": rules })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = acme
            .deploy(&definition(), &[("fetch", common::guest_bytes("fetch"))])
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        // The start's answer waits for the attempt: do not wait for it.
        let starter = {
            let acme = acme.clone();
            let url = api.url("127.0.0.1", "/hang-once");
            tokio::spawn(async move { acme.start("call", json!({ "url": url })).await })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while api.seen().is_empty() {
            assert!(Instant::now() < deadline, "the attempt never called out");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        starter.abort();
        // Kill -9 mid-call; restart after the attempt's lease (30 s deadline + 5 s).
        let srv = srv.restart_at("2030-01-01T00:01:00Z").await;
        let acme = server::Api {
            base: srv.url.clone(),
            ..acme
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while api.seen().len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the attempt was not re-run; log:\n{}",
                srv.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen = api.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let key = |s: &Seen| s.headers.get("idempotency-key").unwrap().clone();
        assert_eq!(
            key(&seen[0]),
            key(&seen[1]),
            "the same key on both requests"
        );
        let (_, list) = acme.get("/v1/instances?process=call").await;
        let id = instance_id(&list["instances"][0]);
        let done = settled(&acme, &id).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let (_, attempts) = acme.get(&format!("/v1/instances/{id}/attempts")).await;
        assert_eq!(
            attempts["attempts"][0]["calls"]["calls"][0]["status"], 200,
            "{attempts}"
        );
    }
}

/// An https server on 127.0.0.1 whose certificate for `api.test` a fresh local CA signed;
/// it answers every request `200 ok` and counts them.
async fn tls_server(dir: &std::path::Path) -> (u16, std::path::PathBuf, Arc<Mutex<usize>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["api.test".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(Mutex::new(0));
    let served = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let served = served.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                *served.lock().unwrap() += 1;
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, ca_file, count)
}

/// https with an operator CA file: the local CA's certificate is trusted;
/// without the file the same call fails its TLS handshake (recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_trusts_the_operator_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let (port, ca_file, served) = tls_server(dir.path()).await;
    let ca = ca_file.display().to_string();
    for (env_ca, expect_ok) in [(Some(ca.as_str()), true), (None, false)] {
        let mut env = vec![
            ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
            ("SUTRA_EGRESS_STATIC_HOSTS", "api.test=127.0.0.1"),
        ];
        if let Some(ca) = env_ca {
            env.push(("SUTRA_EGRESS_CA_FILE", ca));
        }
        let srv = Server::start_with(&env).await;
        let acme = srv.tenant("acme", json!({})).await;
        let before = *served.lock().unwrap();
        let (done, calls) = run(
            &acme,
            json!([{ "host": format!("https://api.test:{port}") }]),
            json!({ "url": format!("https://api.test:{port}/v1/charges") }),
        )
        .await;
        assert_eq!(calls.len(), 1, "{calls:?}");
        if expect_ok {
            assert_eq!(done["state"], "COMPLETED", "{done}");
            assert_eq!(calls[0]["status"], 200, "{calls:?}");
            assert_eq!(calls[0]["scheme"], "https");
            assert_eq!(*served.lock().unwrap(), before + 1);
        } else {
            assert_eq!(done["state"], "FAILED", "{done}");
            assert!(
                calls[0]["reason"].as_str().unwrap().contains("TLS"),
                "{calls:?}"
            );
            assert_eq!(
                *served.lock().unwrap(),
                before,
                "no request without a trusted certificate"
            );
        }
    }
}

fn sutra(srv: &Server, token: &str, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env("SUTRA_SERVER", &srv.url)
        .env("SUTRA_TOKEN", token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sutra");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
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

/// `sutra egress grant|show|list|revoke` and `sutra secret set|list|delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_grants_and_write_only_secrets() {
    let srv = Server::start_with(&[("SUTRA_SECRET_KEY", SECRET_KEY)]).await;
    let acme = srv.tenant("acme", json!({})).await;
    let token = acme.token.clone().unwrap();
    let (srv2, token2) = (&srv, token.as_str());
    let out = ok(&sutra(
        srv2,
        token2,
        &[
            "egress",
            "grant",
            "fetch",
            "--host",
            "https://api.example.com",
            "--method",
            "POST",
            "--secret",
            "stripe",
        ],
        "",
    ));
    assert!(
        out.contains("https://api.example.com") && out.contains("POST"),
        "{out}"
    );
    let out = ok(&sutra(srv2, token2, &["egress", "list"], ""));
    assert!(out.contains("fetch") && out.contains("stripe"), "{out}");
    let bad = sutra(
        srv2,
        token2,
        &["egress", "grant", "fetch", "--host", "api.example.com"],
        "",
    );
    assert!(!bad.status.success());
    ok(&sutra(
        srv2,
        token2,
        &["secret", "set", "stripe"],
        &format!("{SECRET_VALUE}\n"),
    ));
    let out = ok(&sutra(
        srv2,
        token2,
        &["secret", "list", "--format", "json"],
        "",
    ));
    assert!(
        out.contains("stripe") && !out.contains(SECRET_VALUE),
        "{out}"
    );
    ok(&sutra(srv2, token2, &["secret", "delete", "stripe"], ""));
    ok(&sutra(srv2, token2, &["egress", "revoke", "fetch"], ""));
    let gone = sutra(srv2, token2, &["egress", "show", "fetch"], "");
    assert!(!gone.status.success());
}

/// `sutra run --allow-host` grants the run's modules; `sutra task run
/// --allow-host` the one attempt; without it the request is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_runs_grant_with_allow_host() {
    let api = Api::start().await;
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("call.bpmn");
    std::fs::write(&def, definition()).unwrap();
    let fetch = common::guest("fetch");
    let host = format!("http://127.0.0.1:{}", api.port);
    let input = json!({ "url": api.url("127.0.0.1", "/echo") }).to_string();
    let run = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"));
        cmd.arg("run")
            .arg(&def)
            .arg("--task")
            .arg(format!("fetch={}", fetch.display()))
            .args(["--input", &input, "--format", "json"])
            .args(extra)
            .env("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32");
        cmd
    };
    // Blocking here holds one worker; the local API is served by the other.
    let granted = run(&["--allow-host", &host]).output().unwrap();
    let refused = run(&[]).output().unwrap();
    assert!(
        granted.status.success(),
        "{}",
        String::from_utf8_lossy(&granted.stderr)
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("egress grant")
            || String::from_utf8_lossy(&refused.stderr).contains("egress grant"),
        "{refused:?}"
    );
    let task = |allow: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"));
        cmd.args(["task", "run"])
            .arg(&fetch)
            .args(["--input", &input])
            .env("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32");
        if allow {
            cmd.args(["--allow-host", &host]);
        }
        cmd
    };
    let (ok_out, denied) = (task(true).output().unwrap(), task(false).output().unwrap());
    assert!(
        ok_out.status.success(),
        "{}",
        String::from_utf8_lossy(&ok_out.stderr)
    );
    let shown: Value = serde_json::from_slice(&ok_out.stdout).unwrap();
    assert_eq!(shown["calls"]["calls"][0]["status"], 200, "{shown}");
    let shown: Value = serde_json::from_slice(&denied.stdout).unwrap();
    assert_eq!(shown["code"], "SUTRA.TASK.EGRESS_DENIED", "{shown}");
    assert_eq!(api.seen().len(), 2, "only the granted runs called out");
}
