//! Channel calls end to end (000, issue 14), on SQLite and PostgreSQL, on
//! the virtual clock, with a real HTTP counterpart on loopback: the
//! transactional outbox, the signed push request, responses and BPMN
//! errors, the route-less timeout with and without `q:retry`, re-drives
//! (fresh key, RETRY_PENDING), the delivery backoff and the poison ceiling.

#[path = "common/backends.rs"]
mod backends;
#[path = "common/counterpart.rs"]
mod counterpart;

use chrono::{DateTime, TimeZone, Utc};
use counterpart::{closed_url, Counterpart, Mode};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use sutra::config::Config;
use sutra::engine::TaskOutcome;
use sutra::runtime::{ChannelSpec, Runtime, RuntimeOptions, StartRequest};
use sutra::store::channels::{ChannelStore, IncidentFilter, Transport};
use sutra::store::{AnyStore, Store};
use sutra::time::{IsoDuration, VirtualClock};
use sutra::Code;

const TENANT: &str = "acme";
const SECRET: &str = "a-channel-secret-0123456789";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn config() -> Config {
    let mut c = Config::default();
    c.outbox.allowed_hosts = vec!["loopback".into()];
    c
}

fn runtime_with(store: AnyStore, config: Config) -> (Runtime<AnyStore>, Arc<VirtualClock>) {
    let opts = RuntimeOptions::new(config).with_virtual_clock(t0());
    let vc = opts.virtual_clock.clone().unwrap();
    (Runtime::new(store, opts).unwrap(), vc)
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::milliseconds(ms)
}

/// start → Charge (channel:payments, `ext` in its extensionElements) → end,
/// with `extra` (boundaries) after it.
fn process(ext: &str, extra: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:error id="Declined" errorCode="Card.Declined"/>
  <bpmn:error id="Timeout" errorCode="SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT"/>
  <bpmn:process id="pay" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Charge"/>
    <bpmn:serviceTask id="Charge" implementation="channel:payments">
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="Charge" targetRef="end"/>
    <bpmn:endEvent id="end"/>
{extra}
  </bpmn:process>
</bpmn:definitions>"#
    )
}

const DECLINED_BOUNDARY: &str = r#"
    <bpmn:boundaryEvent id="declined" attachedToRef="Charge">
      <bpmn:errorEventDefinition errorRef="Declined"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="declined" targetRef="declinedEnd"/>
    <bpmn:endEvent id="declinedEnd"/>"#;

const TIMEOUT_BOUNDARY: &str = r#"
    <bpmn:boundaryEvent id="late" attachedToRef="Charge">
      <bpmn:errorEventDefinition errorRef="Timeout"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="late" targetRef="lateEnd"/>
    <bpmn:endEvent id="lateEnd"/>"#;

async fn push_channel(rt: &Runtime<AnyStore>, url: &str) {
    rt.set_channel(
        TENANT,
        "payments",
        ChannelSpec {
            transport: Transport::Push,
            url: Some(url.to_string()),
            secret: Some(SECRET.into()),
        },
    )
    .await
    .unwrap();
}

async fn start(rt: &Runtime<AnyStore>, source: &str, vars: Value) -> String {
    rt.deploy(TENANT, source, &BTreeMap::new()).await.unwrap();
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: "pay".into(),
        variables: vars.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

fn vars(v: Value) -> TaskOutcome {
    TaskOutcome::Completed { output: v }
}

/// Advance the virtual clock to `ms` after t0 and fire what is due.
async fn advance(rt: &Runtime<AnyStore>, vc: &VirtualClock, ms: i64) {
    vc.advance_to(at(ms));
    rt.fire_due().await.unwrap();
}

/// A counterpart answering each call through the runtime before its 200
/// (as a service calling back synchronously would).
async fn answer_inline(
    axum::extract::State((rt, posts)): axum::extract::State<(
        Runtime<AnyStore>,
        Arc<std::sync::atomic::AtomicUsize>,
    )>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let correlation = v["correlation"].as_str().unwrap().to_string();
    let out = vars(json!({"paid": v["variables"]["amount"]}));
    match rt.answer(TENANT, "payments", &correlation, out).await {
        Ok(_) => axum::http::StatusCode::OK,
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
    }
}

backends::store_tests! {
    /// The request goes out once, after its step committed, signed; the
    /// answer completes the task with its variables.
    async fn a_request_is_delivered_signed_and_its_answer_completes_the_task(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let id = start(&rt, &process("", ""), json!({"amount": 42})).await;
        let got = cp.wait_for(1).await;
        assert_eq!(got.len(), 1, "delivered exactly once");
        let req = &got[0];
        assert_eq!(req.body["variables"], json!({"amount": 42}));
        assert_eq!(req.body["instance"], json!(id));
        assert_eq!(req.body["task"], json!("Charge"));
        assert_eq!(req.body["attempt"], json!(1));
        assert_eq!(req.idempotency_key, req.body["requestId"].as_str().unwrap());
        // The signature: HMAC-SHA256 of "<t>.<body>" under the channel's secret.
        let t: i64 = req.signature.strip_prefix("t=").unwrap().split(',').next().unwrap().parse().unwrap();
        assert_eq!(req.signature, sutra::runtime::sign(SECRET, t, &req.raw));
        let stored = db.store.get_request(&req.idempotency_key).await.unwrap().unwrap();
        assert_eq!(stored.state, "DELIVERED");
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");

        let correlation = req.body["correlation"].as_str().unwrap();
        let snap = rt.answer(TENANT, "payments", correlation, vars(json!({"charged": true}))).await.unwrap();
        assert_eq!(snap.state.as_str(), "COMPLETED");
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.variables["charged"], json!(true));
        assert_eq!(view.attempts.len(), 1);
        assert_eq!(view.attempts[0].outcome, "completed");
        assert_eq!(cp.received().len(), 1, "an answer never re-sends");
        // The call is over: a second answer finds nothing.
        let again = rt.answer(TENANT, "payments", correlation, vars(json!({}))).await.unwrap_err();
        assert_eq!(again.code, Code::ChannelCallNotFound);
    }

    async fn a_bpmn_error_answer_routes_to_its_boundary(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let src = process(r#"<q:retry maxAttempts="3" initialDelay="PT1S"/><q:timeout duration="PT1M"/>"#, DECLINED_BOUNDARY);
        let id = start(&rt, &src, json!({})).await;
        let correlation = cp.wait_for(1).await[0].body["correlation"].as_str().unwrap().to_string();
        let err = TaskOutcome::BusinessError { code: "Card.Declined".into(), message: "no funds".into(), details: None };
        rt.answer(TENANT, "payments", &correlation, err).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.attempts.len(), 1, "a BPMN error never consumes a retry");
        assert_eq!(view.attempts[0].outcome, "business_error");
        assert_eq!(cp.received().len(), 1);
    }

    /// Without a policy the route-less timeout is a catchable BPMN error.
    async fn a_timeout_without_a_policy_is_a_catchable_bpmn_error(db) {
        let (rt, vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let caught = process(r#"<q:timeout duration="PT30S"/>"#, TIMEOUT_BOUNDARY);
        let id = start(&rt, &caught, json!({})).await;
        advance(&rt, &vc, 29_999).await;
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
        advance(&rt, &vc, 30_000).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "caught by the error boundary: {view:?}");
        assert_eq!(cp.received().len(), 1, "no policy: never re-sent");
        // Uncaught: the instance fails with the timeout's own code.
        let bare = process(r#"<q:timeout duration="PT30S"/>"#, "");
        let id = start(&rt, &bare, json!({})).await;
        rt.settle(&id).await.unwrap();
        let err = rt.inspect(&id).await.unwrap().error.unwrap();
        assert_eq!(err.code, "SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT");
    }

    /// With `q:retry` the timeout is a failed attempt: the request is
    /// re-issued with a fresh key and window; a late answer to the dead
    /// attempt is RETRY_PENDING until the new one went out, then serves.
    async fn a_timeout_with_a_policy_reissues_with_a_fresh_key(db) {
        let (rt, vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let src = process(r#"<q:retry maxAttempts="3" initialDelay="PT10S"/><q:timeout duration="PT30S"/>"#, "");
        let id = start(&rt, &src, json!({"order": 7})).await;
        let first = cp.wait_for(1).await[0].clone();
        let correlation = first.body["correlation"].as_str().unwrap().to_string();
        advance(&rt, &vc, 30_000).await;
        // In the backoff: the late answer to attempt 1 is refused, honestly.
        let late = rt.answer(TENANT, "payments", &correlation, vars(json!({"late": true}))).await.unwrap_err();
        assert_eq!(late.code, Code::ChannelCallRetryPending);
        assert_eq!(cp.received().len(), 1);
        advance(&rt, &vc, 40_000).await;
        let got = cp.wait_for(2).await;
        assert_eq!(got.len(), 2);
        let second = &got[1];
        assert_ne!(second.idempotency_key, first.idempotency_key, "a fresh idempotency key");
        assert_eq!(second.body["correlation"], json!(correlation), "the same correlation");
        assert_eq!(second.body["attempt"], json!(2));
        assert_eq!(second.body["variables"], json!({"order": 7}), "from the same persisted variables");
        // A fresh window: the new request times out 30 s after its issue, not before.
        advance(&rt, &vc, 69_999).await;
        assert_eq!(cp.received().len(), 2);
        // Once re-issued, the same correlation serves normally.
        rt.answer(TENANT, "payments", &correlation, vars(json!({"ok": 1}))).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        let outcomes: Vec<(&str, Option<&str>)> = view.attempts.iter().map(|a| (a.outcome.as_str(), a.code.as_deref())).collect();
        assert_eq!(outcomes, vec![("failed", Some("SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT")), ("completed", None)]);
    }

    async fn spent_timeouts_fail_with_retry_exhausted_and_the_timeout_as_cause(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let src = process(r#"<q:retry maxAttempts="2" initialDelay="PT1S"/><q:timeout duration="PT30S"/>"#, "");
        let id = start(&rt, &src, json!({})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "FAILED");
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        assert_eq!(err.cause.unwrap().code, "SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT");
        assert_eq!(cp.received().len(), 2);
        // nonRetryableCodes naming the timeout: one attempt.
        let src = process(r#"<q:retry maxAttempts="5" initialDelay="PT1S" nonRetryableCodes="SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT"/><q:timeout duration="PT30S"/>"#, "");
        let id = start(&rt, &src, json!({})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.attempts.len(), 1);
        assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        assert_eq!(cp.received().len(), 3);
    }

    /// An unreachable counterpart: deliveries retry with growing, capped
    /// delays and no end by default; the call keeps waiting.
    async fn an_unreachable_counterpart_is_retried_forever_with_growing_delays(db) {
        let mut c = config();
        c.outbox.max_delay = IsoDuration::from_millis(60_000);
        let (rt, vc) = runtime_with(db.store.clone(), c);
        push_channel(&rt, &closed_url().await).await;
        let id = start(&rt, &process("", ""), json!({})).await;
        let request = db.store.requests_of(&id).await.unwrap().remove(0);
        let mut last_due = request.created_at;
        let mut gaps = Vec::new();
        for n in 1..=9 {
            let r = db.store.get_request(&request.id).await.unwrap().unwrap();
            assert_eq!(r.state, "PENDING");
            assert_eq!(r.deliveries, n, "delivery {n} failed and was counted");
            assert!(r.last_error.is_some());
            gaps.push(r.due_at - last_due);
            last_due = r.due_at;
            advance(&rt, &vc, r.due_at - t0().timestamp_millis()).await;
        }
        assert_eq!(gaps, vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
        assert!(db.store.list_incidents(&IncidentFilter::default()).await.unwrap().is_empty());
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
    }

    /// With a ceiling of 3 the delivery is poisoned: retained with its last
    /// error, an incident, and the task hears DELIVERY_ATTEMPTS_EXHAUSTED
    /// at once (not after its timeout).
    async fn a_ceiling_poisons_the_delivery_and_fails_the_call_at_once(db) {
        let mut c = config();
        c.outbox.max_attempts = Some(3);
        let (rt, _vc) = runtime_with(db.store.clone(), c);
        let cp = Counterpart::start().await;
        cp.set_mode(Mode::Status(503));
        push_channel(&rt, &cp.url).await;
        let src = process(r#"<q:retry maxAttempts="1" initialDelay="PT1S"/><q:timeout duration="PT1H"/>"#, "");
        let id = start(&rt, &src, json!({})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "FAILED");
        let err = view.error.unwrap();
        assert_eq!(err.cause.unwrap().code, "SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED");
        assert_eq!(cp.received().len(), 3);
        let ended = view.ended_at.unwrap();
        assert!(ended < at(10_000), "failed after the third delivery (t+3 s), not after the hour: {ended}");
        let r = db.store.requests_of(&id).await.unwrap().remove(0);
        assert_eq!(r.state, "POISONED");
        assert!(r.last_error.unwrap().contains("503"));
        let incidents = db.store.list_incidents(&IncidentFilter { instance_id: Some(id.clone()), ..IncidentFilter::default() }).await.unwrap();
        assert_eq!(incidents.len(), 1);
        assert_eq!(incidents[0].kind, "delivery_poisoned");
        assert_eq!(incidents[0].state, "OPEN");
    }

    async fn unconfigured_channels_are_refused_at_deploy_and_outside_hosts_at_set(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let e = rt.deploy(TENANT, &process("", ""), &BTreeMap::new()).await.unwrap_err();
        assert_eq!(e.code, Code::ChannelNotConfigured);
        // The default policy (`*`) reaches public addresses only.
        let (strict, _) = runtime_with(db.store.clone(), Config::default());
        let e = strict.set_channel(TENANT, "payments", ChannelSpec {
            transport: Transport::Push, url: Some("http://127.0.0.1:9/hook".into()), secret: None,
        }).await.unwrap_err();
        assert_eq!(e.code, Code::OutboundHostNotAllowed);
        let e = strict.set_channel(TENANT, "payments", ChannelSpec {
            transport: Transport::Push, url: Some("http://169.254.169.254/latest".into()), secret: None,
        }).await.unwrap_err();
        assert_eq!(e.code, Code::OutboundHostNotAllowed);
        assert!(db.store.get_channel(TENANT, "payments").await.unwrap().is_none());
    }

    async fn another_tenant_cannot_answer_a_call(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let id = start(&rt, &process("", ""), json!({})).await;
        let correlation = cp.wait_for(1).await[0].body["correlation"].as_str().unwrap().to_string();
        let e = rt.answer("intruder", "payments", &correlation, vars(json!({}))).await.unwrap_err();
        assert_eq!(e.code, Code::ChannelCallNotFound);
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
        // The wrong channel of the right tenant finds nothing either.
        let e = rt.answer(TENANT, "other", &correlation, vars(json!({}))).await.unwrap_err();
        assert_eq!(e.code, Code::ChannelCallNotFound);
    }

    /// A cancelled call's undelivered request is never sent.
    async fn an_undelivered_request_of_an_ended_call_is_cancelled(db) {
        let (rt, vc) = runtime_with(db.store.clone(), config());
        push_channel(&rt, &closed_url().await).await;
        let id = start(&rt, &process("", ""), json!({})).await;
        rt.cancel(&id, None).await.unwrap();
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        advance(&rt, &vc, 5_000).await;
        assert!(cp.received().is_empty());
        let r = db.store.requests_of(&id).await.unwrap().remove(0);
        assert_eq!(r.state, "CANCELLED");
    }

    /// A counterpart that answers the call while its POST is still open:
    /// the answer's step records the delivery too (DELIVERED, one delivery,
    /// as the 2xx would have), and nothing is sent again.
    async fn an_answer_during_the_post_records_the_delivery(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let posts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(answer_inline))
            .with_state((rt.clone(), posts.clone()));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        push_channel(&rt, &url).await;
        // On the virtual clock the start returns once its delivery ended.
        let id = start(&rt, &process("", ""), json!({"amount": 7})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.variables["paid"], json!(7));
        let r = db.store.requests_of(&id).await.unwrap().remove(0);
        assert_eq!(r.state, "DELIVERED");
        assert_eq!(r.deliveries, 1);
        assert_eq!(r.claimed_by, None);
        assert_eq!(r.last_error, None);
        assert!(r.sent_at.is_some());
        rt.fire_due().await.unwrap();
        assert_eq!(posts.load(std::sync::atomic::Ordering::SeqCst), 1, "sent once");
    }

    /// A FAILED instance migrated onto a fixed version resumes at its
    /// failed task with a fresh budget and completes; the old version retires.
    async fn a_failed_instance_migrated_to_a_fixed_version_completes(db) {
        let mut c = config();
        c.outbox.max_attempts = Some(1);
        let (rt, _vc) = runtime_with(db.store.clone(), c);
        let cp = Counterpart::start().await;
        cp.set_mode(Mode::Status(500));
        push_channel(&rt, &cp.url).await;
        let v1 = process(r#"<q:retry maxAttempts="1" initialDelay="PT1S"/><q:timeout duration="PT1H"/>"#, "");
        let id = start(&rt, &v1, json!({"n": 1})).await;
        rt.settle(&id).await.unwrap();
        let failed = rt.inspect(&id).await.unwrap();
        assert_eq!(failed.state, "FAILED");
        let old = failed.deployment.clone();
        // The fix: version 2 calls a healthy channel.
        rt.set_channel(TENANT, "ledger", ChannelSpec { transport: Transport::Push, url: Some(cp.url.clone()), secret: None }).await.unwrap();
        cp.set_mode(Mode::Ok);
        let v2 = v1.replace("channel:payments", "channel:ledger");
        let new = rt.deploy(TENANT, &v2, &BTreeMap::new()).await.unwrap().remove(0);
        let moved = rt.migrate(TENANT, &id, &sutra::runtime::MigrateRequest { target: new.id.clone(), mapping: BTreeMap::new() }).await.unwrap();
        assert_eq!(moved.state.as_str(), "WAITING");
        assert_eq!(moved.deployment_id, new.id);
        let got = cp.wait_for(2).await;
        assert_eq!(got[1].body["channel"], json!("ledger"));
        assert_eq!(got[1].body["attempt"], json!(1), "a fresh budget");
        let correlation = got[1].body["correlation"].as_str().unwrap();
        rt.answer(TENANT, "ledger", correlation, vars(json!({"done": true}))).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.deployment, new.id);
        let old = db.store.get_deployment(&old).await.unwrap().unwrap();
        assert_eq!(old.state.as_str(), "RETIRED");
    }

    async fn migration_refuses_a_node_without_counterpart(db) {
        let (rt, _vc) = runtime_with(db.store.clone(), config());
        let cp = Counterpart::start().await;
        push_channel(&rt, &cp.url).await;
        let v1 = process(r#"<q:timeout duration="PT1H"/>"#, "");
        let id = start(&rt, &v1, json!({})).await;
        let v2 = v1.replace("\"Charge\"", "\"Charge2\"");
        let new = rt.deploy(TENANT, &v2, &BTreeMap::new()).await.unwrap().remove(0);
        let req = sutra::runtime::MigrateRequest { target: new.id.clone(), mapping: BTreeMap::new() };
        let e = rt.migrate(TENANT, &id, &req).await.unwrap_err();
        assert_eq!(e.code, Code::MigrationUnmappedNode);
        // Mapped, it moves: the waiting call keeps its park, now on version 2.
        let mapping = BTreeMap::from([("Charge".to_string(), "Charge2".to_string())]);
        let req = sutra::runtime::MigrateRequest { target: new.id.clone(), mapping };
        rt.migrate(TENANT, &id, &req).await.unwrap();
        let parks = db.store.parks_of(&id).await.unwrap();
        assert!(parks.iter().all(|p| p.deployment_id == new.id), "{parks:?}");
        let correlation = cp.received()[0].body["correlation"].as_str().unwrap().to_string();
        rt.answer(TENANT, "payments", &correlation, vars(json!({}))).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }
}
