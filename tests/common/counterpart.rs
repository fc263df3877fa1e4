//! A real HTTP counterpart on loopback for channel tests: it records every
//! request the outbox POSTs (headers and JSON body) and answers as told —
//! 200, an error status, or never (the connection hangs).
//!
//! Invariant: bound to 127.0.0.1 port 0, served by its own task until the
//! value is dropped; every wait on it is bounded.
#![allow(dead_code)]

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the counterpart answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Status(u16),
    /// Accept, read, never answer.
    Hang,
}

/// One request it received.
#[derive(Debug, Clone)]
pub struct Received {
    pub idempotency_key: String,
    pub signature: String,
    pub body: Value,
    pub raw: String,
}

#[derive(Default)]
struct Shared {
    received: Vec<Received>,
    mode: Option<Mode>,
}

pub struct Counterpart {
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

async fn hook(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let mode = {
        let mut s = shared.lock().unwrap();
        s.received.push(Received {
            idempotency_key: header("idempotency-key"),
            signature: header("sutra-signature"),
            body: serde_json::from_str(&body).unwrap_or(Value::Null),
            raw: body,
        });
        s.mode.unwrap_or(Mode::Ok)
    };
    match mode {
        Mode::Ok => StatusCode::OK,
        Mode::Status(code) => {
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }
    }
}

impl Counterpart {
    pub async fn start() -> Counterpart {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Counterpart {
            url: format!("http://{addr}/hook"),
            shared,
            task,
        }
    }

    pub fn set_mode(&self, mode: Mode) {
        self.shared.lock().unwrap().mode = Some(mode);
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.lock().unwrap().received.clone()
    }

    /// Waits (at most 30 s) until it has received `n` requests.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "the counterpart received {} requests, not {n}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Counterpart {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A URL on loopback where nothing listens.
pub async fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/hook")
}
