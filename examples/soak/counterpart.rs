//! The channel's counterpart on loopback: it counts every delivery by its
//! `Idempotency-Key`, refuses three first deliveries in ten (503: the outbox
//! sends them again), acknowledges the others after up to 0.4 s, and answers the call through the
//! API (`POST /v1/channels/soak/responses`) on whichever replica is up,
//! with `{"answered": <the instance's n>}`.
//!
//! Invariant: an answer is retried until a replica gives a final word (200,
//! or 404: the call was answered already); a re-delivery is answered again
//! (at least once is the contract), and only counted.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
pub struct Deliveries {
    /// Deliveries per idempotency key.
    pub by_key: BTreeMap<String, u32>,
    /// Keys per instance id.
    pub by_instance: BTreeMap<String, Vec<String>>,
    /// The calls whose answer a replica took, by correlation: a 200, or a
    /// 404 after a try whose reply was lost (a kill between the answer's
    /// commit and its 200); re-deliveries' answers count once.
    pub answered: std::collections::BTreeSet<String>,
    /// First deliveries refused with a 503.
    pub refused: u64,
}

#[derive(Clone)]
struct Shared {
    deliveries: Arc<Mutex<Deliveries>>,
    urls: Vec<String>,
    token: String,
    http: reqwest::Client,
}

pub struct Counterpart {
    /// The channel's push URL.
    pub url: String,
    /// `http://127.0.0.1:PORT`, which HTTP tasks call (`ledger.rs`).
    pub base: String,
    pub deliveries: Arc<Mutex<Deliveries>>,
    pub ledger: crate::ledger::Shared,
    task: tokio::task::JoinHandle<()>,
}

async fn hook(State(s): State<Shared>, headers: HeaderMap, body: String) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let instance = body["instance"].as_str().unwrap_or_default().to_string();
    let first = {
        let mut d = s.deliveries.lock().unwrap();
        let seen = d.by_key.entry(key.clone()).or_default();
        *seen += 1;
        let first = *seen == 1;
        d.by_instance.entry(instance).or_default().push(key);
        first
    };
    if first && rand::random_bool(0.3) {
        // Refuse some first deliveries: the outbox retries them, durably.
        s.deliveries.lock().unwrap().refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let answer = json!({
        "correlation": body["correlation"],
        "variables": {"answered": body["variables"]["n"]},
    });
    tokio::spawn(answer_call(s, answer));
    // A slow 200, so that kills land while deliveries are in flight (the
    // call may well be answered before its delivery is acknowledged).
    let ms = rand::random_range(0..400);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    StatusCode::OK
}

async fn answer_call(s: Shared, answer: Value) {
    let correlation = answer["correlation"].to_string();
    let mut lost = false;
    for n in 0..600u32 {
        let url = &s.urls[n as usize % s.urls.len()];
        let sent = s
            .http
            .post(format!("{url}/v1/channels/soak/responses"))
            .bearer_auth(&s.token)
            .json(&answer)
            .send()
            .await;
        match sent.map(|r| r.status()) {
            Ok(StatusCode::OK) => {
                s.deliveries.lock().unwrap().answered.insert(correlation);
                return;
            }
            // Answered already: by another delivery's answer, or by this
            // one when its reply was lost.
            Ok(StatusCode::NOT_FOUND) => {
                if lost {
                    s.deliveries.lock().unwrap().answered.insert(correlation);
                }
                return;
            }
            // Down or restarting (the answer may have been taken): again.
            Err(_) => {
                lost = true;
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            // The call re-issuing its request: again.
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

impl Counterpart {
    pub async fn start(urls: Vec<String>, token: String) -> anyhow::Result<Counterpart> {
        let deliveries = Arc::new(Mutex::new(Deliveries::default()));
        let shared = Shared {
            deliveries: deliveries.clone(),
            urls,
            token,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ledger = crate::ledger::Shared::default();
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(shared)
            .merge(crate::ledger::routes(ledger.clone()));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Counterpart {
            url: format!("http://{addr}/hook"),
            base: format!("http://{addr}"),
            deliveries,
            ledger,
            task,
        })
    }
}

impl Drop for Counterpart {
    fn drop(&mut self) {
        self.task.abort();
    }
}
