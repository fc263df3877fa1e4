//! Hostile requests against a spawned `sutra serve`: a table of malformed
//! requests and a few hundred generated ones. None may produce a 5xx, and
//! every refusal is the API's error shape with a code.

mod common;
#[path = "common/server.rs"]
mod server;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::Server;

const PROCESS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// (what, method, path, content type, body, expected status)
type Case = (
    &'static str,
    Method,
    String,
    Option<&'static str>,
    Vec<u8>,
    StatusCode,
);

/// The answer must be a 4xx in the error shape (or a 2xx).
fn check(what: &str, status: StatusCode, body: &Value) {
    assert!(!status.is_server_error(), "{what}: {status} {body}");
    if !status.is_success() {
        let code = body["code"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no code in {body}"));
        assert!(code.starts_with("SUTRA."), "{what}: {body}");
        assert!(
            body.get("message").is_some() && body.get("details").is_some(),
            "{what}: {body}"
        );
    }
}

async fn raw(
    api: &server::Api,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let mut req = api.request(method, path).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    api.send(req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_4xx_with_a_code_and_never_5xx() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api.deploy(PROCESS, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, inst) = api.start("order", json!({})).await;
    let iid = inst["instance"].as_str().unwrap().to_string();
    let json_ct = Some("application/json");

    let table: Vec<Case> = vec![
        (
            "bad JSON",
            Method::POST,
            "/v1/processes/order/instances".into(),
            json_ct,
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown field",
            Method::POST,
            "/v1/processes/order/instances".into(),
            json_ct,
            br#"{"variables":{},"extra":1}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            // Well-formed, but a BPMN process starts with an object of
            // variables (only a States-language execution takes any JSON
            // value, issue 34): 422 SUTRA.RUNTIME.INSTANCE.INPUT_INVALID.
            "variables not an object",
            Method::POST,
            "/v1/processes/order/instances".into(),
            json_ct,
            br#"{"variables":[1]}"#.to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "a JSON array",
            Method::POST,
            "/v1/processes/order/instances".into(),
            json_ct,
            b"[]".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "not JSON content",
            Method::POST,
            "/v1/processes/order/instances".into(),
            Some("text/plain"),
            b"hello".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "body over the cap",
            Method::POST,
            "/v1/processes/order/instances".into(),
            json_ct,
            vec![b' '; 2 * 1024 * 1024],
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "bad process id",
            Method::POST,
            "/v1/processes/or%20der/instances".into(),
            json_ct,
            b"{}".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "bad instance id",
            Method::GET,
            "/v1/instances/..%2F..%2Fetc".into(),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "overlong id",
            Method::GET,
            format!("/v1/instances/{}", "a".repeat(300)),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown query parameter",
            Method::GET,
            "/v1/instances?color=red".into(),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "bad state filter",
            Method::GET,
            "/v1/instances?state=SLEEPING".into(),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "bad limit",
            Method::GET,
            "/v1/instances?limit=-3".into(),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "limit not a number",
            Method::GET,
            "/v1/instances?limit=lots".into(),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "bad retry mode",
            Method::POST,
            format!("/v1/instances/{iid}/retry?mode=x"),
            None,
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            "cancel with junk",
            Method::POST,
            format!("/v1/instances/{iid}/cancel"),
            json_ct,
            br#"{"why":1}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "message without name",
            Method::POST,
            "/v1/messages".into(),
            json_ct,
            br#"{"variables":{}}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "message with empty name",
            Method::POST,
            "/v1/messages".into(),
            json_ct,
            br#"{"name":""}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "deploy without multipart",
            Method::POST,
            "/v1/deployments".into(),
            json_ct,
            b"{}".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "deploy with a broken multipart",
            Method::POST,
            "/v1/deployments".into(),
            Some("multipart/form-data; boundary=XX"),
            b"--XX\r\nnonsense".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown route",
            Method::GET,
            "/v1/nothing".into(),
            None,
            vec![],
            StatusCode::NOT_FOUND,
        ),
        (
            "wrong method",
            Method::PATCH,
            "/v1/instances".into(),
            None,
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "invalid UTF-8 JSON",
            Method::POST,
            "/v1/messages".into(),
            json_ct,
            vec![b'{', 0xff, 0xfe, b'}'],
            StatusCode::BAD_REQUEST,
        ),
        (
            "deeply nested JSON",
            Method::POST,
            "/v1/messages".into(),
            json_ct,
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (what, method, path, ct, body, expected) in table {
        let (status, answer) = raw(&api, method, &path, ct, body).await;
        check(what, status, &answer);
        assert_eq!(status, expected, "{what}: {answer}");
    }
    // Admin routes: junk bodies.
    let admin = srv.admin();
    for (what, body) in [
        ("tenant without name", r#"{"limits":{}}"#),
        ("tenant bad name", r#"{"name":"Not Valid"}"#),
        (
            "negative quota",
            r#"{"name":"x","limits":{"maxInstances":-1}}"#,
        ),
        ("unknown limit", r#"{"name":"x","limits":{"cpus":4}}"#),
    ] {
        let (status, answer) = raw(
            &admin,
            Method::POST,
            "/v1/admin/tenants",
            json_ct,
            body.as_bytes().to_vec(),
        )
        .await;
        check(what, status, &answer);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
    }
    let (status, answer) = raw(
        &admin,
        Method::POST,
        "/v1/admin/clock/advance",
        json_ct,
        br#"{"by":"P1M"}"#.to_vec(),
    )
    .await;
    check("unsupported duration", status, &answer);
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Generated requests: random methods, paths built from route pieces and
/// junk, random bodies and content types. A few hundred, none a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_hundred_generated_requests_never_produce_a_5xx() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api.deploy(PROCESS, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let segment = prop_oneof![
        Just("v1".to_string()),
        Just("instances".to_string()),
        Just("processes".to_string()),
        Just("order".to_string()),
        Just("deployments".to_string()),
        Just("messages".to_string()),
        Just("cancel".to_string()),
        Just("retry".to_string()),
        Just("history".to_string()),
        Just("schedules".to_string()),
        Just("admin".to_string()),
        Just("tenants".to_string()),
        Just("%00".to_string()),
        Just("%2e%2e".to_string()),
        "[a-zA-Z0-9%._~-]{0,40}",
    ];
    let route = prop_oneof![
        Just("/v1/deployments".to_string()),
        Just("/v1/processes/order/instances".to_string()),
        Just("/v1/instances".to_string()),
        Just("/v1/messages".to_string()),
        Just("/v1/admin/tenants".to_string()),
        Just("/v1/admin/clock/advance".to_string()),
        proptest::collection::vec(segment, 0..6).prop_map(|segs| format!("/{}", segs.join("/"))),
    ];
    let path = (route, proptest::option::of("[a-z=&%0-9]{0,30}")).prop_map(|(p, q)| {
        let mut p = p;
        if let Some(q) = q {
            p.push('?');
            p.push_str(&q);
        }
        p
    });
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::DELETE),
        Just(Method::PATCH)
    ];
    let body = prop_oneof![
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 0..200),
        "\\PC{0,80}".prop_map(String::into_bytes),
        Just(br#"{"variables":{"a":1}}"#.to_vec()),
        Just(br#"{"name":"go","correlationKey":null,"variables":{}}"#.to_vec()),
    ];
    let ct = prop_oneof![
        Just(None),
        Just(Some("application/json")),
        Just(Some("text/plain")),
        Just(Some("multipart/form-data; boundary=zz")),
        Just(Some("multipart/form-data")),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 300,
        ..Config::default()
    });
    let mut cases = Vec::new();
    let strategy = (method, path, ct, body);
    for _ in 0..300 {
        let tree = strategy.new_tree(&mut runner).expect("generate");
        cases.push(proptest::strategy::ValueTree::current(&tree));
    }
    let admin = srv.admin();
    for (method, path, ct, body) in cases {
        let what = format!("{method} {path} ({ct:?}, {} bytes)", body.len());
        // Half with the tenant's key, half with the admin's.
        let who = if path.len() % 2 == 0 { &api } else { &admin };
        let (status, answer) = raw(who, method, &path, ct, body).await;
        check(&what, status, &answer);
    }
    // Still healthy afterwards.
    let (status, _) = srv.anonymous().get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
}
