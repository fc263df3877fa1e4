//! HTTP tasks in BPMN (`q:http`) and HX (`type="http"`) through a real
//! `sutra serve` and a local API on loopback, on SQLite and PostgreSQL: a
//! call whose result lands in a variable, and a failed call routed — to an
//! error boundary by its `Api.*` code (BPMN), along an error edge with its
//! code and class (HX).

mod common;
#[path = "common/http_api.rs"]
mod http_api;
#[path = "common/server.rs"]
mod server;

use http_api::{instance_id, settled, HttpApi, SECRET_KEY};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::{Db, Server};

async fn setup(db: Db) -> Option<(Server, server::Api, HttpApi)> {
    let srv = Server::start_on(
        db,
        &[
            ("SUTRA_EGRESS_ALLOWED_CIDRS", "127.0.0.1/32"),
            ("SUTRA_SECRET_KEY", SECRET_KEY),
        ],
    )
    .await?;
    let acme = srv.tenant("acme", json!({})).await;
    let api = HttpApi::start().await;
    let (status, body) = acme
        .call(
            Method::PUT,
            "/v1/egress/sutra:http",
            Some(json!({ "allow": [{ "host": format!("http://127.0.0.1:{}", api.port) }] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = acme
        .call(
            Method::PUT,
            "/v1/connections/shop",
            Some(
                json!({"endpoint": api.url("/"), "authorization": {"type": "bearer"},
                        "credential": "shop-token-1"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    Some((srv, acme, api))
}

async fn run(acme: &server::Api, definition: &str, process: &str, input: Value) -> Value {
    let (status, body) = acme.deploy(definition, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, started) = acme.start(process, input).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    settled(acme, &instance_id(&started)).await
}

fn bpmn(http: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:error id="clientError" errorCode="Api.HttpClientError"/>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="charge"/>
    <bpmn:serviceTask id="charge" implementation="http">
      <bpmn:extensionElements>
        {http}
        <q:io resultPath="$.charge"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="refused" attachedToRef="charge">
      <bpmn:errorEventDefinition errorRef="clientError"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="charge" targetRef="done"/>
    <bpmn:sequenceFlow id="f3" sourceRef="refused" targetRef="declined"/>
    <bpmn:endEvent id="done"/>
    <bpmn:endEvent id="declined"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bpmn_http_task_calls_out_and_its_client_error_reaches_the_boundary() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some((_srv, acme, api)) = setup(db).await else {
            continue;
        };
        let ok = bpmn(
            r#"<q:http method="POST" connection="shop" path="echo" body="order">
                 <q:header name="X-Team" value="payments"/>
               </q:http>"#,
        );
        let done = run(&acme, &ok, "order", json!({"order": {"sku": "p-1"}})).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        let charge = &done["variables"]["charge"];
        assert_eq!(charge["StatusCode"], 200, "{done}");
        assert_eq!(
            charge["ResponseBody"]["json"],
            json!({"sku": "p-1"}),
            "{done}"
        );
        assert_eq!(done["nodes"]["done"], "SUCCEEDED", "{done}");
        let seen = api.last();
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer shop-token-1".into())
        );
        assert_eq!(seen.header("x-team"), Some("payments".into()));
        assert!(!done.to_string().contains("shop-token-1"), "{done}");

        let refused = bpmn(&format!(
            r#"<q:http method="GET" url="{}"/>"#,
            api.url("/status/422")
        ));
        let done = run(&acme, &refused, "order", json!({})).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(done["nodes"]["declined"], "SUCCEEDED", "{done}");
        assert!(done["nodes"].get("done").is_none(), "{done}");
        // A bad q:http is refused at load with its position.
        let (status, body) = acme.deploy(&bpmn(r#"<q:http method="FETCH"/>"#), &[]).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let text = body.to_string();
        assert!(text.contains("method `FETCH`"), "{text}");
        assert!(text.contains("needs `url` or `connection`"), "{text}");
    }
}

fn hx(url: &str) -> String {
    format!(
        r#"<?xml version="1.0"?>
<workflow id="fetch">
  <node id="get" type="http" method="GET" url="{url}" result="got">
    <header name="X-Team" value="ops"/>
    <retry maxAttempts="2" initialDelay="PT1S" retryOn="rate_limit"/>
  </node>
  <node id="ok" type="pass"/>
  <node id="handle" type="pass"/>
  <edges>
    <edge from="get" to="ok"/>
    <edge from="get" to="handle" type="error"/>
  </edges>
</workflow>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hx_http_node_calls_out_and_its_failure_takes_the_error_edge() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some((srv, acme, api)) = setup(db).await else {
            continue;
        };
        let done = run(&acme, &hx(&api.url("/echo")), "fetch", json!({})).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(done["variables"]["got"]["StatusCode"], 200, "{done}");
        assert_eq!(done["variables"]["got"]["ResponseBody"]["method"], "GET");
        assert_eq!(done["nodes"]["ok"], "SUCCEEDED", "{done}");
        assert_eq!(api.last().header("x-team"), Some("ops".into()));
        // A 500 is transient, not rate_limit: not retried; the error edge.
        let before = api.count("/status/500");
        let done = run(&acme, &hx(&api.url("/status/500")), "fetch", json!({})).await;
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(done["nodes"]["handle"], "SUCCEEDED", "{done}");
        let error = &done["variables"]["error"];
        assert_eq!(error["node"], "get", "{done}");
        assert_eq!(error["cause"]["code"], "Api.HttpServerError", "{done}");
        assert_eq!(
            api.count("/status/500"),
            before + 1,
            "retryOn: rate_limit only"
        );
        // A 429 is rate_limit: retried once (after 1 s on the manual clock), then the error edge.
        let before = api.count("/status/429");
        let (status, body) = acme.deploy(&hx(&api.url("/status/429")), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (_, started) = acme.start("fetch", json!({})).await;
        let id = instance_id(&started);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
            if view["waits"][0]["kind"] == "retry" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no retry: {view}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        srv.advance("PT1S").await;
        let done = settled(&acme, &id).await;
        assert_eq!(done["nodes"]["handle"], "SUCCEEDED", "{done}");
        assert_eq!(
            api.count("/status/429"),
            before + 2,
            "retried on rate_limit"
        );
        // A bad http node: HX codes with positions.
        let bad = r#"<?xml version="1.0"?>
<workflow id="bad">
  <node id="get" type="http" method="FETCH" impl="x"/>
</workflow>"#;
        let (status, body) = acme.deploy(bad, &[]).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let text = body.to_string();
        assert!(text.contains("HX-1004"), "{text}");
        assert!(
            text.contains("HX-1003"),
            "`impl` is not an http node's: {text}"
        );
    }
}
