//! A local HTTP API on 127.0.0.1 for the HTTP-task tests: it records every
//! request and answers by path (see [`handle`]); and the helpers those
//! tests share.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use axum::response::IntoResponse;
use axum::routing::any;
use axum::Router;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[allow(dead_code)]
pub const SECRET_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// One request the API received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

#[allow(dead_code)]
impl Seen {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap_or_default().to_string())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

#[derive(Default)]
struct Shared {
    seen: Vec<Seen>,
    tokens: u32,
    valid: Option<String>,
}

type St = Arc<Mutex<Shared>>;

/// `/echo`: what it got as JSON (header `x-kind: echo`); `/text`: plain
/// text; `/status/N`: N with `boom N`; `/slow`: no answer for an hour;
/// `/bad-json`: a body declared JSON that is not; `/unavailable-once`: 503
/// with `Retry-After: 7`, then 200; `/limited-once`: 429 with
/// `Retry-After: 2`, then 200; `/hang-once`: the first request hangs;
/// `/token`: an OAuth token endpoint (`tok-N`, 60 s); `…/protected`: 200
/// `{"who": "flows"}` with the last token, else 401.
async fn handle(
    State(st): State<St>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let path = uri.path().to_string();
    let n = {
        let mut g = st.lock().unwrap();
        g.seen.push(Seen {
            path: path.clone(),
            headers: headers.clone(),
            body: body.to_vec(),
        });
        g.seen.iter().filter(|s| s.path == path).count()
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    if let Some(code) = path.strip_prefix("/status/") {
        let code: u16 = code.parse().unwrap_or(500);
        return (AxStatus::from_u16(code).unwrap(), format!("boom {code}")).into_response();
    }
    if path.ends_with("/protected") {
        let valid = st.lock().unwrap().valid.clone();
        let got = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        return match valid {
            Some(t) if got == Some(format!("Bearer {t}")) => {
                axum::Json(json!({"who": "flows"})).into_response()
            }
            _ => (AxStatus::UNAUTHORIZED, "who are you").into_response(),
        };
    }
    match path.as_str() {
        "/echo" => (
            [("x-kind", "echo")],
            axum::Json(json!({
                "method": method.as_str(),
                "path": path,
                "query": uri.query().unwrap_or_default(),
                "json": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
                "text": text,
            })),
        )
            .into_response(),
        "/text" => ([("x-kind", "text")], "plain words").into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "late".into_response()
        }
        "/bad-json" => ([("content-type", "application/json")], "{nope").into_response(),
        "/unavailable-once" if n == 1 => (
            AxStatus::SERVICE_UNAVAILABLE,
            [("retry-after", "7")],
            "later",
        )
            .into_response(),
        "/limited-once" if n == 1 => (
            AxStatus::TOO_MANY_REQUESTS,
            [("retry-after", "2")],
            "slow down",
        )
            .into_response(),
        "/hang-once" if n == 1 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "late".into_response()
        }
        "/token" => {
            let token = {
                let mut g = st.lock().unwrap();
                g.tokens += 1;
                let t = format!("tok-{}", g.tokens);
                g.valid = Some(t.clone());
                t
            };
            axum::Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 60}))
                .into_response()
        }
        _ => axum::Json(json!({"ok": true})).into_response(),
    }
}

pub struct HttpApi {
    pub port: u16,
    st: St,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl HttpApi {
    pub async fn start() -> HttpApi {
        let st: St = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = Router::new().fallback(any(handle)).with_state(st.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HttpApi { port, st, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.st.lock().unwrap().seen.clone()
    }

    pub fn last(&self) -> Seen {
        self.seen().last().cloned().expect("a request")
    }

    pub fn all(&self, path: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.path == path).collect()
    }

    pub fn first(&self, path: &str) -> Seen {
        self.all(path).first().cloned().expect("a request")
    }

    pub fn count(&self, path: &str) -> usize {
        self.all(path).len()
    }

    /// The API stops accepting the tokens it gave.
    pub fn revoke_tokens(&self) {
        self.st.lock().unwrap().valid = None;
    }
}

impl Drop for HttpApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls the instance (at most 60 s) until it is no longer RUNNING.
pub async fn settled(api: &super::server::Api, id: &str) -> Value {
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

pub fn instance_id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap_or_else(|| panic!("no id in {v}"))
        .to_string()
}
