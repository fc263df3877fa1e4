//! `fetch`: a task component that calls an HTTP API through
//! `wasi:http/outgoing-handler` (the Rust example of "Calling an API from a
//! task" in the README, and the egress tests' guest).
//!
//! Input: one request `{"url", "method"?, "headers"?: {name: value}, "body"?}`,
//! or `{"requests": [request, ...]}` made one after the other.
//! - One request: completes with `{"status", "headers", "body"}` (the body as
//!   text); a request the host refuses or that fails ends the attempt as a
//!   failure `FETCH.ERROR` whose message is wasi:http's error code (e.g.
//!   `HttpRequestDenied`), class `transient`.
//! - Several: completes with `{"responses": [...]}`, each a response as
//!   above or `{"error": "<error code>"}`; never fails for a request's error.
//!
//! A header value may hold a secret's placeholder, `{{secret:NAME}}`: the host
//! substitutes it on the wire, so this guest only ever sees the placeholder.

#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "task",
        path: "../../wit",
    });
}

#[allow(clippy::too_many_arguments)]
mod wasi {
    wit_bindgen::generate!({
        world: "fetch-wasi",
        path: "wit",
        generate_all,
    });
}

use bindings::sutra::task::types::{Context, ErrorInfo, TaskError};
use bindings::Guest;
use serde_json::{json, Map, Value};
use wasi::wasi::http::outgoing_handler;
use wasi::wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

struct Fetch;

fn failure(code: &str, message: String) -> TaskError {
    TaskError::Failure(ErrorInfo {
        code: code.to_string(),
        message,
        details: Some(r#"{"class":"transient"}"#.to_string()),
    })
}

/// `scheme://authority/path?query` → its parts.
fn split_url(url: &str) -> Result<(Scheme, String, String), String> {
    let (scheme, rest) = url.split_once("://").ok_or(format!("`{url}` is not a URL"))?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok((scheme, authority.to_string(), path.to_string()))
}

/// One request; `Err` is wasi:http's error code (or a malformed request).
fn send(req: &Value) -> Result<Value, String> {
    let url = req["url"].as_str().ok_or("a request needs a `url`")?;
    let (scheme, authority, path) = split_url(url)?;
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(h) = req["headers"].as_object() {
        for (k, v) in h {
            headers.push((k.clone(), v.as_str().unwrap_or_default().as_bytes().to_vec()));
        }
    }
    let fields = Fields::from_list(&headers).map_err(|e| format!("{e:?}"))?;
    let request = OutgoingRequest::new(fields);
    let method = match req["method"].as_str().unwrap_or("GET") {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "HEAD" => Method::Head,
        other => Method::Other(other.to_string()),
    };
    request.set_method(&method).map_err(|_| "bad method")?;
    request.set_scheme(Some(&scheme)).map_err(|_| "bad scheme")?;
    request.set_authority(Some(&authority)).map_err(|_| "bad authority")?;
    request.set_path_with_query(Some(&path)).map_err(|_| "bad path")?;
    let body = request.body().map_err(|_| "no body")?;
    if let Some(text) = req["body"].as_str() {
        let out = body.write().map_err(|_| "no body stream")?;
        for chunk in text.as_bytes().chunks(4096) {
            out.blocking_write_and_flush(chunk).map_err(|e| format!("{e:?}"))?;
        }
        drop(out);
    }
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    OutgoingBody::finish(body, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return Err(format!("{e:?}")),
        Some(Err(())) | None => return Err("no response".into()),
    };
    let status = response.status();
    let mut shown = Map::new();
    for (k, v) in response.headers().entries() {
        shown.insert(k, Value::String(String::from_utf8_lossy(&v).into_owned()));
    }
    let incoming = response.consume().map_err(|_| "no body")?;
    let stream = incoming.stream().map_err(|_| "no body stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(wasi::wasi::io::streams::StreamError::Closed) => break,
            Err(wasi::wasi::io::streams::StreamError::LastOperationFailed(e)) => {
                let code = wasi::wasi::http::types::http_error_code(&e);
                return Err(match code {
                    Some(c) => format!("{c:?}"),
                    None => e.to_debug_string(),
                });
            }
        }
    }
    Ok(json!({
        "status": status,
        "headers": shown,
        "body": String::from_utf8_lossy(&bytes),
    }))
}

impl Guest for Fetch {
    fn run(_ctx: Context, input: String) -> Result<String, TaskError> {
        let v: Value = serde_json::from_str(&input)
            .map_err(|e| failure("SUTRA.TASK.VALIDATION", format!("input is not JSON: {e}")))?;
        let out = match v["requests"].as_array() {
            Some(list) => {
                let responses: Vec<Value> = list
                    .iter()
                    .map(|r| send(r).unwrap_or_else(|e| json!({ "error": e })))
                    .collect();
                json!({ "responses": responses })
            }
            None => send(&v).map_err(|e| failure("FETCH.ERROR", e))?,
        };
        Ok(out.to_string())
    }
}

bindings::export!(Fetch with_types_in bindings);
