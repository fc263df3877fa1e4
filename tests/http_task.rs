//! HTTP tasks (issue 31) through a real `sutra serve` and a local API on
//! loopback (opened by the operator's `sutra.egress.allowed-cidrs`), on
//! SQLite and PostgreSQL: the States language's HTTP Task (`sutra:http` and
//! `arn:aws:states:::http:invoke`) with its result mapped, every error name
//! caught with `{Error, Cause}` merged at a ResultPath, Retry with a
//! `Retry-After` capped by MaxDelaySeconds, OAuth tokens fetched once and
//! refreshed (never in any answer), connections write-only, a kill -9
//! during a call. BPMN and HX: `tests/http_task_dialects.rs`.

mod common;
#[path = "common/http_api.rs"]
mod http_api;
#[path = "common/server.rs"]
mod server;

use http_api::{instance_id, settled, HttpApi, SECRET_KEY};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::{Db, Server};
use std::time::{Duration, Instant};

fn backends() -> [Db; 2] {
    [Db::Sqlite, Db::Postgres]
}

async fn server(db: Db, extra: &[(&str, &str)]) -> Option<Server> {
    let mut env = vec![
        ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
        ("SUTRA_SECRET_KEY", SECRET_KEY),
    ];
    env.extend_from_slice(extra);
    Server::start_on(db, &env).await
}

/// Grant HTTP tasks the local API (`PUT /v1/egress/sutra:http`).
async fn grant(tenant: &server::Api, port: u16) {
    let (status, body) = tenant
        .call(
            Method::PUT,
            "/v1/egress/sutra:http",
            Some(json!({ "allow": [{ "host": format!("http://127.0.0.1:{port}") }] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Deploy `definition`, start it with `input`, wait until it settles.
async fn run(tenant: &server::Api, definition: &Value, input: Value) -> Value {
    let (status, body) = tenant.deploy(&definition.to_string(), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let name = definition["Name"].as_str().unwrap();
    let (status, started) = tenant.start(name, input).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    settled(tenant, &instance_id(&started)).await
}

fn call_machine(name: &str, resource: &str, parameters: Value) -> Value {
    json!({
        "Name": name, "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task", "Resource": resource, "Parameters": parameters,
                "ResultSelector": {"status.$": "$.StatusCode", "text.$": "$.StatusText",
                                   "body.$": "$.ResponseBody", "kind.$": "$.Headers.x-kind"},
                "ResultPath": "$.answer", "End": true
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_task_calls_the_api_and_its_result_is_mapped() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        // No grant: the call is refused by the policy, not made.
        let denied = run(
            &acme,
            &call_machine(
                "ungranted",
                "sutra:http",
                json!({"ApiEndpoint": api.url("/echo"), "Method": "GET"}),
            ),
            json!({}),
        )
        .await;
        assert_eq!(denied["state"], "FAILED", "{denied}");
        assert_eq!(denied["error"]["cause"]["code"], "Api.Refused", "{denied}");
        assert!(api.seen().is_empty(), "a denied call never goes out");

        grant(&acme, api.port).await;
        for resource in ["sutra:http", "arn:aws:states:::http:invoke"] {
            let done = run(
                &acme,
                &call_machine(
                    "order",
                    resource,
                    json!({
                        "ApiEndpoint.$": "$.url", "Method": "POST",
                        "Headers": {"X-Team": "payments"},
                        "QueryParameters": {"page": "2", "tag": ["a", "b"]},
                        "RequestBody": {"sku.$": "$.sku", "qty": 3}
                    }),
                ),
                json!({ "url": api.url("/echo"), "sku": "p-1" }),
            )
            .await;
            assert_eq!(done["state"], "COMPLETED", "{done}");
            let answer = &done["variables"]["answer"];
            assert_eq!(answer["status"], 200, "{done}");
            assert_eq!(answer["text"], "OK", "{done}");
            assert_eq!(answer["kind"], "echo", "{done}");
            assert_eq!(answer["body"]["method"], "POST", "{done}");
            assert_eq!(answer["body"]["query"], "page=2&tag=a&tag=b", "{done}");
            assert_eq!(
                answer["body"]["json"],
                json!({"sku": "p-1", "qty": 3}),
                "{done}"
            );
            assert_eq!(done["variables"]["sku"], "p-1", "the input is kept beside");
            let seen = api.last();
            assert_eq!(seen.header("x-team"), Some("payments".into()));
            assert_eq!(seen.header("content-type"), Some("application/json".into()));
            let key = seen.header("idempotency-key").expect("an Idempotency-Key");
            assert!(key.starts_with(&instance_id(&done)), "{key}");
            // The attempt's call record: the path without its query, the
            // request headers, an excerpt of the body.
            let (_, attempts) = acme
                .get(&format!("/v1/instances/{}/attempts", instance_id(&done)))
                .await;
            let call = &attempts["attempts"][0]["calls"]["calls"][0];
            assert_eq!(call["method"], "POST", "{attempts}");
            assert_eq!(call["path"], "/echo", "{attempts}");
            assert_eq!(call["status"], 200, "{attempts}");
            assert_eq!(call["request_headers"]["x-team"], "payments", "{attempts}");
            assert!(
                call["response_excerpt"]
                    .as_str()
                    .unwrap()
                    .contains("\"method\":\"POST\""),
                "{attempts}"
            );
        }
        // A text body stays a string; a URL-encoded body is encoded.
        let done = run(
            &acme,
            &call_machine(
                "form",
                "sutra:http",
                json!({
                    "ApiEndpoint": api.url("/echo"), "Method": "POST",
                    "RequestBody": {"amount": 5, "items": ["x", "y"]},
                    "Transform": {"RequestBodyEncoding": "URL_ENCODED",
                                  "RequestEncodingOptions": {"ArrayFormat": "BRACKETS"}}
                }),
            ),
            json!({}),
        )
        .await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(
            done["variables"]["answer"]["body"]["text"], "amount=5&items%5B%5D=x&items%5B%5D=y",
            "{done}"
        );
        assert_eq!(
            api.last().header("content-type"),
            Some("application/x-www-form-urlencoded".into())
        );
        let done = run(
            &acme,
            &call_machine(
                "text",
                "sutra:http",
                json!({"ApiEndpoint": api.url("/text"), "Method": "GET"}),
            ),
            json!({}),
        )
        .await;
        assert_eq!(done["variables"]["answer"]["body"], "plain words", "{done}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_http_task_is_refused_at_load_with_its_position() {
    let srv = Server::start().await;
    let acme = srv.tenant("acme", json!({})).await;
    let bad = r#"{"StartAt": "Call", "States": {"Call": {
        "Type": "Task", "Resource": "sutra:http",
        "Parameters": {"ApiEndpoint": "http://127.0.0.1:9/x", "Method": "FETCH", "Body": 1},
        "End": true}}}"#;
    let (status, body) = acme.deploy(bad, &[]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let text = body.to_string();
    assert!(text.contains("SUTRA.CONFIG.STATES.HTTP_TASK"), "{text}");
    assert!(text.contains("no field `Body`"), "{text}");
    assert!(text.contains("`Method` must be one of"), "{text}");
    assert!(text.contains("\"line\":3"), "{text}");
}

/// Each failure is caught by `States.ALL` with `{Error, Cause}` merged at
/// `$.error` beside the input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_name_is_raised_and_caught_with_its_cause() {
    for db in backends() {
        let Some(srv) = server(db, &[("SUTRA_EGRESS_FIRST_BYTE_TIMEOUT", "PT1S")]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        // The API and a port nothing listens on are granted.
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/egress/sutra:http",
                Some(
                    json!({ "allow": [{ "host": format!("http://127.0.0.1:{}", api.port) },
                                       { "host": format!("http://127.0.0.1:{closed}") }] }),
                ),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let ungranted = if api.port + 1 == closed {
            api.port + 2
        } else {
            api.port + 1
        };
        let machine = json!({
            "Name": "errors", "StartAt": "Call",
            "States": {
                "Call": {
                    "Type": "Task", "Resource": "sutra:http",
                    "Parameters": {"ApiEndpoint.$": "$.url", "Method": "GET"},
                    "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}],
                    "End": true
                },
                "Caught": {"Type": "Pass", "End": true}
            }
        });
        let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let cases = [
            (
                api.url("/status/404"),
                "Api.HttpClientError",
                "404 Not Found: boom 404",
            ),
            (
                api.url("/status/429"),
                "Api.HttpClientError",
                "429 Too Many Requests",
            ),
            (
                api.url("/status/502"),
                "Api.HttpServerError",
                "502 Bad Gateway: boom 502",
            ),
            (api.url("/slow"), "Api.Timeout", "no answer in time"),
            (api.url("/bad-json"), "Mapper.Failure", "does not parse"),
            (
                format!("http://127.0.0.1:{closed}/x"),
                "Api.Refused",
                "connect failed",
            ),
            (
                format!("http://127.0.0.1:{ungranted}/x"),
                "Api.Refused",
                "host not granted",
            ),
        ];
        for (url, code, cause) in cases {
            let (status, started) = acme.start("errors", json!({ "url": url, "keep": 1 })).await;
            assert_eq!(status, StatusCode::CREATED, "{started}");
            let done = settled(&acme, &instance_id(&started)).await;
            assert_eq!(done["state"], "COMPLETED", "{url}: {done}");
            let v = &done["variables"];
            assert_eq!(v["keep"], 1, "the input is kept: {done}");
            assert_eq!(v["error"]["Error"], code, "{url}: {done}");
            let got = v["error"]["Cause"].as_str().unwrap();
            assert!(got.contains(cause), "{url}: {got}");
            assert!(!got.contains('?'), "no query in a cause: {got}");
        }
        // A connection the tenant does not have; an input that is no request.
        let mut machine = machine;
        machine["Name"] = json!("errors2");
        machine["States"]["Call"]["Parameters"] = json!({
            "ApiEndpoint.$": "$.url", "Method": "GET", "Authentication.$": "$.auth"
        });
        let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        // An OAuth connection whose token endpoint refuses the client.
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/connections/broken",
                Some(json!({"authorization": {"type": "oauth2_client_credentials",
                                              "token_url": api.url("/status/401"), "client_id": "c"},
                            "credential": "s"})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for (auth, code) in [
            (json!({"ConnectionName": "none"}), "Credential.NotFound"),
            (
                json!({"ConnectionName": "broken"}),
                "Credential.TokenFailed",
            ),
            (json!("no object"), "Mapper.Failure"),
        ] {
            let (_, started) = acme
                .start("errors2", json!({ "url": api.url("/echo"), "auth": auth }))
                .await;
            let done = settled(&acme, &instance_id(&started)).await;
            assert_eq!(done["variables"]["error"]["Error"], code, "{done}");
        }
    }
}

/// A 503 with `Retry-After: 7` under a retrier whose backoff is 1 s and
/// whose MaxDelaySeconds is 5: the retry waits 5 s; a 429's `Retry-After: 2`
/// without a cap waits 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_within_the_maximum_delay() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        grant(&acme, api.port).await;
        for (path, max, waits, due) in [
            ("/unavailable-once", Some(5), 5, "2030-01-01T00:00:05Z"),
            ("/limited-once", None, 2, "2030-01-01T00:00:07Z"),
        ] {
            let mut retrier = json!({"ErrorEquals": ["Api.HttpServerError", "Api.HttpClientError"],
                                     "IntervalSeconds": 1, "MaxAttempts": 3});
            if let Some(m) = max {
                retrier["MaxDelaySeconds"] = json!(m);
            }
            let name = format!("retry{waits}");
            let machine = json!({
                "Name": name, "StartAt": "Call",
                "States": {"Call": {"Type": "Task", "Resource": "sutra:http",
                    "Parameters": {"ApiEndpoint": api.url(path), "Method": "GET"},
                    "Retry": [retrier], "End": true}}
            });
            let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            let before = api.count(path);
            let (status, started) = acme.start(&name, json!({})).await;
            assert_eq!(status, StatusCode::CREATED, "{started}");
            let id = instance_id(&started);
            // The retry park is due at the Retry-After (capped), not at the 1 s backoff.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
                if view["waits"][0]["kind"] == "retry" {
                    assert_eq!(view["waits"][0]["due"], due, "{view}");
                    break;
                }
                assert!(Instant::now() < deadline, "no retry wait: {view}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(api.count(path), before + 1);
            srv.advance(&format!("PT{}S", waits - 1)).await;
            let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
            assert_eq!(view["state"], "WAITING", "{view}");
            assert_eq!(api.count(path), before + 1, "not retried before {waits} s");
            srv.advance("PT1S").await;
            let done = settled(&acme, &id).await;
            assert_eq!(done["state"], "COMPLETED", "{done}");
            assert_eq!(api.count(path), before + 2);
        }
    }
}

async fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const CLIENT_SECRET: &str = "cs-9f3b-client-secret";

/// Everything a tenant can read about an instance, as one text.
async fn every_answer(acme: &server::Api, id: &str) -> String {
    let mut all = String::new();
    for path in [
        format!("/v1/instances/{id}"),
        format!("/v1/instances/{id}/attempts"),
        format!("/v1/instances/{id}/history"),
        "/v1/connections".to_string(),
        "/v1/connections/crm".to_string(),
        "/v1/secrets".to_string(),
    ] {
        let (_, v) = acme.get(&path).await;
        all.push_str(&v.to_string());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_token_is_fetched_once_refreshed_and_never_shown() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        grant(&acme, api.port).await;
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/connections/crm",
                Some(json!({
                    "endpoint": api.url("/api"),
                    "authorization": {"type": "oauth2_client_credentials",
                                      "token_url": api.url("/token"), "client_id": "flows"},
                    "credential": CLIENT_SECRET
                })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(!body.to_string().contains(CLIENT_SECRET), "{body}");
        let machine = json!({
            "Name": "crm", "StartAt": "Call",
            "States": {"Call": {"Type": "Task", "Resource": "arn:aws:states:::http:invoke",
                "Parameters": {"ApiEndpoint": "/protected", "Method": "GET",
                    "Authentication": {"ConnectionArn": "arn:aws:events:eu-west-1:123456789012:connection/crm/0a1b"}},
                "ResultSelector": {"who.$": "$.ResponseBody.who"}, "End": true}}
        });
        let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (_, started) = acme.start("crm", json!({})).await;
            let done = settled(&acme, &instance_id(&started)).await;
            assert_eq!(done["state"], "COMPLETED", "{done}");
            assert_eq!(done["variables"]["who"], "flows", "{done}");
            ids.push(instance_id(&done));
        }
        assert_eq!(api.count("/token"), 1, "the token is fetched once");
        let form = api.first("/token").text();
        assert!(form.contains("grant_type=client_credentials"), "{form}");
        // Past its expiry (60 s) on the runtime's clock: fetched again.
        srv.advance("PT61S").await;
        let (_, started) = acme.start("crm", json!({})).await;
        let done = settled(&acme, &instance_id(&started)).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(api.count("/token"), 2, "refreshed after its expiry");
        // The API revokes the token: a 401, a fresh token, one retry.
        api.revoke_tokens();
        let (_, started) = acme.start("crm", json!({})).await;
        let done = settled(&acme, &instance_id(&started)).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(api.count("/token"), 3, "refreshed on a 401");
        ids.push(instance_id(&done));
        for id in &ids {
            let all = every_answer(&acme, id).await;
            assert!(!all.contains("tok-"), "a token in an answer: {all}");
            assert!(
                !all.contains(CLIENT_SECRET),
                "the secret in an answer: {all}"
            );
            assert!(
                all.contains("[redacted]"),
                "the header is named, redacted: {all}"
            );
        }
        let log = srv.log();
        assert!(
            !log.contains("tok-") && !log.contains(CLIENT_SECRET),
            "{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_per_tenant_write_only_and_authorize_requests() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let other = srv.tenant("other", json!({})).await;
        let api = HttpApi::start().await;
        grant(&acme, api.port).await;
        for (name, auth, secret, header, expect) in [
            (
                "key",
                json!({"type": "api_key", "header": "X-Api-Key"}),
                "k-123",
                "x-api-key",
                "k-123",
            ),
            (
                "basic",
                json!({"type": "basic", "username": "ann"}),
                "pw",
                "authorization",
                "Basic YW5uOnB3",
            ),
            (
                "bearer",
                json!({"type": "bearer"}),
                "b-77",
                "authorization",
                "Bearer b-77",
            ),
        ] {
            let (status, body) = acme
                .call(
                    Method::PUT,
                    &format!("/v1/connections/{name}"),
                    Some(json!({"endpoint": api.url(""), "authorization": auth, "credential": secret})),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let machine = call_machine(
                &format!("with-{name}"),
                "sutra:http",
                json!({"ApiEndpoint": "echo", "Method": "GET",
                       "Authentication": {"ConnectionName": name}}),
            );
            let done = run(&acme, &machine, json!({})).await;
            assert_eq!(done["state"], "COMPLETED", "{done}");
            assert_eq!(api.last().header(header), Some(expect.to_string()));
            let (_, attempts) = acme
                .get(&format!("/v1/instances/{}/attempts", instance_id(&done)))
                .await;
            let call = &attempts["attempts"][0]["calls"]["calls"][0];
            assert_eq!(call["request_headers"][header], "[redacted]", "{attempts}");
            assert!(!attempts.to_string().contains(secret), "{attempts}");
        }
        let (status, listed) = acme.get("/v1/connections").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            listed["connections"].as_array().unwrap().len(),
            3,
            "{listed}"
        );
        assert_eq!(listed["connections"][0]["authorization"]["type"], "basic");
        let (_, secrets) = acme.get("/v1/secrets").await;
        assert_eq!(
            secrets["secrets"],
            json!([]),
            "credentials are not secrets: {secrets}"
        );
        let (status, _) = other.get("/v1/connections/key").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's");
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/connections/bad",
                Some(json!({"authorization": {"type": "api_key", "header": "bad header"}, "credential": "x"})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, _) = acme.call(Method::DELETE, "/v1/connections/key", None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _) = acme.get("/v1/connections/key").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}

/// A kill -9 while an HTTP task waits for its answer: the attempt was
/// committed before the request went out, so after the restart its park
/// re-runs it with the same idempotency key; a completed call is not made
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_call_retries_it_with_the_same_key_and_never_repeats_a_done_one() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        grant(&acme, api.port).await;
        let machine = json!({
            "Name": "slowcall", "StartAt": "Call",
            "States": {
                "Call": {"Type": "Task", "Resource": "sutra:http",
                         "Parameters": {"ApiEndpoint.$": "$.url", "Method": "POST"},
                         "ResultPath": "$.first", "Next": "Then"},
                "Then": {"Type": "Task", "Resource": "sutra:http",
                         "Parameters": {"ApiEndpoint.$": "$.url2", "Method": "POST"},
                         "ResultPath": "$.second", "End": true}
            }
        });
        let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let starter = {
            let acme = acme.clone();
            let input = json!({ "url": api.url("/echo"), "url2": api.url("/hang-once") });
            tokio::spawn(async move { acme.start("slowcall", input).await })
        };
        wait_until(|| api.count("/hang-once") == 1).await;
        starter.abort();
        assert_eq!(api.count("/echo"), 1);
        let srv = srv.restart_at("2030-01-01T00:01:00Z").await;
        let acme = server::Api {
            base: srv.url.clone(),
            ..acme
        };
        wait_until(|| api.count("/hang-once") == 2).await;
        let (_, list) = acme.get("/v1/instances?process=slowcall").await;
        let id = instance_id(&list["instances"][0]);
        let done = settled(&acme, &id).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let keys: Vec<String> = api
            .all("/hang-once")
            .iter()
            .map(|s| s.header("idempotency-key").unwrap())
            .collect();
        assert_eq!(keys[0], keys[1], "the same key on both requests");
        assert_eq!(
            api.count("/echo"),
            1,
            "the completed call was not made again"
        );
        assert_eq!(done["variables"]["first"]["StatusCode"], 200, "{done}");
    }
}

fn sutra(env: &[(&str, &str)], args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"));
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run sutra");
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

/// `sutra connection set|show|list|delete` (the credential on stdin, never
/// shown), and `sutra run --allow-host` granting a local run's HTTP tasks
/// (loopback also needs the operator's CIDR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_connections_and_a_local_run_grants_with_allow_host() {
    let srv = Server::start_with(&[("SUTRA_SECRET_KEY", SECRET_KEY)]).await;
    let acme = srv.tenant("acme", json!({})).await;
    let token = acme.token.clone().unwrap();
    let env = [
        ("SUTRA_SERVER", srv.url.as_str()),
        ("SUTRA_TOKEN", token.as_str()),
    ];
    let out = ok(&sutra(
        &env,
        &[
            "connection",
            "set",
            "crm",
            "--type",
            "api-key",
            "--header",
            "X-Api-Key",
            "--endpoint",
            "https://api.example.com",
        ],
        "k-secret-42\n",
    ));
    assert!(
        out.contains("api_key") && out.contains("X-Api-Key"),
        "{out}"
    );
    assert!(!out.contains("k-secret-42"), "{out}");
    let out = ok(&sutra(
        &env,
        &["connection", "list", "--format", "json"],
        "",
    ));
    assert!(out.contains("crm") && !out.contains("k-secret-42"), "{out}");
    let bad = sutra(&env, &["connection", "set", "x", "--type", "basic"], "pw\n");
    assert_eq!(bad.status.code(), Some(2), "--type basic needs --username");
    ok(&sutra(&env, &["connection", "delete", "crm"], ""));
    assert!(!sutra(&env, &["connection", "show", "crm"], "")
        .status
        .success());

    let api = HttpApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("call.asl.json");
    let machine = call_machine(
        "local",
        "sutra:http",
        json!({"ApiEndpoint": api.url("/echo"), "Method": "GET"}),
    );
    std::fs::write(&file, machine.to_string()).unwrap();
    let host = format!("http://127.0.0.1:{}", api.port);
    let path = file.to_str().unwrap();
    let cidr = [("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32")];
    let out = ok(&sutra(&cidr, &["run", path, "--allow-host", &host], ""));
    assert!(out.contains("COMPLETED"), "{out}");
    assert_eq!(api.count("/echo"), 1);
    // Without --allow-host: refused, never sent.
    let denied = sutra(&cidr, &["run", path], "");
    assert!(!denied.status.success());
    assert_eq!(api.count("/echo"), 1);
    // Without the CIDR: loopback is a denied address.
    let denied = sutra(&[], &["run", path, "--allow-host", &host], "");
    let text = String::from_utf8_lossy(&denied.stdout).to_string()
        + &String::from_utf8_lossy(&denied.stderr);
    assert!(!denied.status.success(), "{text}");
    assert!(text.contains("Api.Refused"), "{text}");
    assert_eq!(api.count("/echo"), 1);
}

/// JSONata `Arguments` build the request; `Output` maps the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonata_arguments_build_the_request() {
    let Some(srv) = server(Db::Sqlite, &[]).await else {
        return;
    };
    let acme = srv.tenant("acme", json!({})).await;
    let api = HttpApi::start().await;
    grant(&acme, api.port).await;
    let machine = json!({
        "Name": "jsonata", "QueryLanguage": "JSONata", "StartAt": "Call",
        "States": {"Call": {"Type": "Task", "Resource": "sutra:http",
            "Arguments": {"ApiEndpoint": "{% $states.input.url %}", "Method": "PUT",
                          "RequestBody": {"n": "{% $states.input.n + 1 %}"}},
            "Output": {"status": "{% $states.result.StatusCode %}",
                       "sent": "{% $states.result.ResponseBody.json.n %}"},
            "End": true}}
    });
    let done = run(&acme, &machine, json!({ "url": api.url("/echo"), "n": 41 })).await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert_eq!(
        done["variables"],
        json!({"status": 200, "sent": 42}),
        "{done}"
    );
    assert_eq!(api.last().text(), r#"{"n":42}"#);
    // A literal bad field is refused at load in JSONata too.
    let mut bad = machine.clone();
    bad["Name"] = json!("bad");
    bad["States"]["Call"]["Arguments"]["Method"] = json!("FETCH");
    let (status, body) = acme.deploy(&bad.to_string(), &[]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body.to_string().contains("SUTRA.CONFIG.STATES.HTTP_TASK"),
        "{body}"
    );
}

/// A credential that cannot be opened — the server restarted under another
/// `SUTRA_SECRET_KEY`, the old one not kept in `SUTRA_SECRET_PREVIOUS_KEYS`
/// — is `Credential.Unavailable`, caught like the other names; the request
/// is never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_that_cannot_be_opened_is_credential_unavailable() {
    for db in backends() {
        let Some(srv) = server(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let api = HttpApi::start().await;
        grant(&acme, api.port).await;
        let (status, body) = acme
            .call(
                Method::PUT,
                "/v1/connections/kept",
                Some(json!({"endpoint": api.url(""), "authorization": {"type": "bearer"}, "credential": "t-1"})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let machine = json!({
            "Name": "sealed", "StartAt": "Call",
            "States": {
                "Call": {
                    "Type": "Task", "Resource": "sutra:http",
                    "Parameters": {"ApiEndpoint": "echo", "Method": "GET",
                                   "Authentication": {"ConnectionName": "kept"}},
                    "Catch": [{"ErrorEquals": ["Credential.Unavailable"], "ResultPath": "$.error", "Next": "Caught"}],
                    "End": true
                },
                "Caught": {"Type": "Pass", "End": true}
            }
        });
        let (status, body) = acme.deploy(&machine.to_string(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let other_key = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
        let srv = srv
            .restart_with(&[("SUTRA_SECRET_KEY", other_key)], "2030-01-01T00:01:00Z")
            .await;
        let acme = server::Api {
            base: srv.url.clone(),
            ..acme
        };
        let before = api.seen().len();
        let (status, started) = acme.start("sealed", json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{started}");
        let done = settled(&acme, &instance_id(&started)).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(
            done["variables"]["error"]["Error"], "Credential.Unavailable",
            "{done}"
        );
        let cause = done["variables"]["error"]["Cause"].as_str().unwrap();
        assert!(!cause.contains("t-1"), "never the credential: {cause}");
        assert_eq!(api.seen().len(), before, "nothing was sent");
    }
}
