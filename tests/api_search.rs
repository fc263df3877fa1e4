//! Search by business data (issue 35 item 3), through a real `sutra serve`
//! on SQLite and PostgreSQL: a business key given at the start is shown and
//! found (`businessKey=`), kept by a retry; `var.NAME=VALUE` finds instances
//! by a top-level scalar variable as it is now (after a message or an
//! operator's edit changed it), never by an object, never another tenant's;
//! malformed filters are a 400 with their code.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{Api, Db, Server};

const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

/// start → T (chaos) → end.
fn one_task() -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// start → wait for message `paid` (key `orderId`) → end.
fn waits() -> String {
    format!(
        r#"{HEADER}
  <bpmn:message id="Paid" name="paid"/>
  <bpmn:process id="payment" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="orderId"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Paid"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

async fn start_keyed(api: &Api, process: &str, key: Option<&str>, vars: Value) -> Value {
    let mut body = json!({ "variables": vars });
    if let Some(k) = key {
        body["businessKey"] = json!(k);
    }
    let (status, view) = api
        .post(&format!("/v1/processes/{process}/instances"), body)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    view
}

/// The ids a listing answers, in its order.
async fn ids(api: &Api, query: &str) -> Vec<String> {
    let (status, list) = api.get(&format!("/v1/instances?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{query}: {list}");
    list["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

fn id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_business_key_is_shown_found_and_kept_by_a_retry() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let chaos = common::guest_bytes("chaos");
        let (status, body) = acme.deploy(&one_task(), &[("chaos", chaos.clone())]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let failed = start_keyed(
            &acme,
            "order",
            Some("order 4711 / ACME"),
            json!({"do": "fail", "code": "BAD.DATA"}),
        )
        .await;
        assert_eq!(failed["state"], "FAILED", "{failed}");
        assert_eq!(failed["businessKey"], "order 4711 / ACME");
        start_keyed(&acme, "order", Some("order 4712"), json!({})).await;
        start_keyed(&acme, "order", None, json!({})).await;

        let found = ids(&acme, "businessKey=order%204711%20%2F%20ACME").await;
        assert_eq!(found, vec![id(&failed)]);
        let (_, list) = acme.get("/v1/instances?businessKey=order%204712").await;
        assert_eq!(list["instances"][0]["businessKey"], "order 4712", "{list}");
        assert!(ids(&acme, "businessKey=order").await.is_empty());
        // Ids begin with their start instant: the retry a virtual millisecond later.
        srv.advance("PT0.001S").await;

        // A retry keeps the key: both are found by it, the retry newest first.
        let (status, retried) = acme
            .post(&format!("/v1/instances/{}/retry", id(&failed)), json!({}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{retried}");
        assert_eq!(retried["businessKey"], "order 4711 / ACME", "{retried}");
        let found = ids(&acme, "businessKey=order%204711%20%2F%20ACME&order=newest").await;
        assert_eq!(found, vec![id(&retried), id(&failed)]);

        // Never another tenant's.
        let globex = srv.tenant("globex", json!({})).await;
        assert!(ids(&globex, "businessKey=order%204712").await.is_empty());

        // A key the index cannot hold is refused at the start and in a filter.
        for bad in ["", "line\nbreak"] {
            let (status, body) = acme
                .post(
                    "/v1/processes/order/instances",
                    json!({"variables": {}, "businessKey": bad}),
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
            assert_eq!(body["code"], "SUTRA.API.MALFORMED_REQUEST", "{body}");
        }
        let long = "k".repeat(257);
        let (status, _) = acme.get(&format!("/v1/instances?businessKey={long}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_are_found_by_their_current_value() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let (status, body) = acme.deploy(&waits(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let a = start_keyed(
            &acme,
            "payment",
            None,
            json!({"orderId": "A-1", "status": "new", "total": 12.5, "vip": true,
                   "lines": [1, 2], "customer": {"id": "c-9"}}),
        )
        .await;
        assert_eq!(a["state"], "WAITING", "{a}");
        // Ids begin with their start instant: one virtual millisecond apart.
        srv.advance("PT0.001S").await;
        let b = start_keyed(
            &acme,
            "payment",
            None,
            json!({"orderId": "B-2", "status": "new", "total": 7, "vip": false}),
        )
        .await;
        let (a, b) = (id(&a), id(&b));

        assert_eq!(ids(&acme, "var.orderId=A-1").await, vec![a.clone()]);
        assert_eq!(
            ids(&acme, "var.status=new").await,
            vec![a.clone(), b.clone()]
        );
        assert_eq!(ids(&acme, "var.total=12.5").await, vec![a.clone()]);
        assert_eq!(ids(&acme, "var.total=7").await, vec![b.clone()]);
        assert_eq!(
            ids(&acme, "var.vip=true&var.status=new").await,
            vec![a.clone()]
        );
        assert!(ids(&acme, "var.vip=false&var.orderId=A-1").await.is_empty());
        // Arrays and objects are not searchable, whatever the text.
        assert!(ids(&acme, "var.lines=%5B1%2C2%5D").await.is_empty());
        assert!(ids(&acme, "var.customer=c-9").await.is_empty());
        // With the other filters, and paged.
        assert_eq!(
            ids(
                &acme,
                "var.status=new&state=WAITING&process=payment&limit=1"
            )
            .await,
            vec![a.clone()]
        );

        // A message that changes a variable: found by its new value only.
        let (status, answer) = acme
            .post(
                "/v1/messages",
                json!({"name": "paid", "correlationKey": "A-1", "variables": {"status": "paid"}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(ids(&acme, "var.status=paid").await, vec![a.clone()]);
        assert_eq!(ids(&acme, "var.status=new").await, vec![b.clone()]);

        // An operator's edit too, and an unset variable is no longer found.
        let (status, view) = acme
            .post(
                &format!("/v1/instances/{b}/variables"),
                json!({"set": {"status": "on hold"}, "unset": ["vip"]}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(ids(&acme, "var.status=on%20hold").await, vec![b.clone()]);
        assert!(ids(&acme, "var.vip=false").await.is_empty());
        assert_eq!(ids(&acme, "var.orderId=B-2").await, vec![b.clone()]);

        // Never another tenant's.
        let globex = srv.tenant("globex", json!({})).await;
        assert!(ids(&globex, "var.orderId=B-2").await.is_empty());

        // Malformed filters.
        for bad in [
            "var.=x".to_string(),
            format!("var.x={}", "v".repeat(257)),
            (0..9)
                .map(|n| format!("var.v{n}=1"))
                .collect::<Vec<_>>()
                .join("&"),
            "variable.x=1".to_string(),
        ] {
            let (status, body) = acme.get(&format!("/v1/instances?{bad}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
            assert_eq!(body["code"], "SUTRA.API.MALFORMED_REQUEST", "{body}");
        }
    }
}

/// start → wait for message `paid` → end, its business key the start
/// variable `orderId` (`q:businessKey`).
fn keyed_by_order() -> String {
    format!(
        r#"{HEADER}
  <bpmn:message id="Paid" name="paid"/>
  <bpmn:process id="keyed" isExecutable="true">
    <bpmn:extensionElements><q:businessKey variable="orderId"/></bpmn:extensionElements>
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Paid"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_names_the_variable_that_is_its_business_key() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let (status, body) = acme.deploy(&keyed_by_order(), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let by_var = start_keyed(&acme, "keyed", None, json!({"orderId": "O-7"})).await;
        assert_eq!(by_var["businessKey"], "O-7", "{by_var}");
        let numeric = start_keyed(&acme, "keyed", None, json!({"orderId": 42})).await;
        assert_eq!(numeric["businessKey"], "42", "{numeric}");
        // A key given at the start wins; no variable, no key.
        let given = start_keyed(&acme, "keyed", Some("PO-1"), json!({"orderId": "O-8"})).await;
        assert_eq!(given["businessKey"], "PO-1", "{given}");
        let none = start_keyed(&acme, "keyed", None, json!({"other": 1})).await;
        assert!(none.get("businessKey").is_none(), "{none}");
        assert_eq!(ids(&acme, "businessKey=O-7").await, vec![id(&by_var)]);

        // A q:businessKey without its variable is refused at load.
        let bad =
            keyed_by_order().replace(r#"<q:businessKey variable="orderId"/>"#, "<q:businessKey/>");
        let (status, body) = acme.deploy(&bad, &[]).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(
            body.to_string()
                .contains("SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE"),
            "{body}"
        );
    }
}
