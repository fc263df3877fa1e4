//! What the browser tests of the console share: definitions, deploying
//! with chaos, signing in, the CSP check, where screenshots go.

#![allow(dead_code)]

use super::common;
use super::server::{self, Server};
use super::webdriver::Browser;
use reqwest::StatusCode;
use serde_json::json;
use std::path::PathBuf;

pub const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

/// start → T (chaos, no retry policy) → end; no diagram interchange.
pub fn one_task(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" name="Reserve stock" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// start → wait for message `go` → end.
pub fn waits_for_message(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

pub fn file(path: &str) -> String {
    std::fs::read_to_string(common::root().join(path)).unwrap()
}

pub fn chaos() -> Vec<u8> {
    common::guest_bytes("chaos")
}

pub fn screenshots() -> PathBuf {
    common::root().join("target/console-screenshots")
}

/// Deploy `def` with chaos playing every module `modules` names; its deployment id.
pub async fn deploy(api: &server::Api, def: &str, modules: &[&str]) -> String {
    let parts: Vec<(&str, Vec<u8>)> = modules.iter().map(|m| (*m, chaos())).collect();
    let (status, body) = api.deploy(def, &parts).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["deployments"][0]["id"].as_str().unwrap().to_string()
}

pub async fn sign_in(b: &Browser, srv: &Server, key: &str) {
    b.goto(&format!("{}/", srv.url)).await;
    b.wait_for(
        "the redirect to /ui/",
        "location.pathname === '/ui/'",
        json!(null),
    )
    .await;
    b.type_into("#key", key).await;
    b.click("#signin").await;
    // Signed in once the key was accepted (the sign-out button shows): a
    // navigation clicked before that meets the sign-in form, and the sign-in
    // then lands on its own first page.
    b.wait_for(
        "the key to be accepted",
        "!document.getElementById('signout').hidden",
        json!(null),
    )
    .await;
}

/// No Content-Security-Policy violation happened on the page.
pub async fn no_csp_violations(b: &Browser) {
    let v = b
        .js("return window.__cspViolations || [];", json!([]))
        .await;
    assert_eq!(v, json!([]), "CSP violations");
}

pub async fn diagram_has(b: &Browser, element: &str, source: &str) {
    b.wait_for(
        &format!("the diagram to draw {element}"),
        "document.querySelector(`#diagram .djs-element[data-element-id=\"${arg[0]}\"]`) \
         && document.querySelector('#diagram').dataset.diagram === arg[1]",
        json!([element, source]),
    )
    .await;
}

/// start → Charge (a call on pull channel `reviews`: an external task) → end.
pub fn channel_call(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Charge"/>
    <bpmn:serviceTask id="Charge" implementation="channel:reviews"/>
    <bpmn:sequenceFlow id="f2" sourceRef="Charge" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}
