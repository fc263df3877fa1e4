//! External tasks (the pull transport of channel calls), on SQLite and
//! PostgreSQL, on the virtual clock: fetch-and-lock, complete, failure with
//! worker retries then an incident, lock expiry, long polling, a complete
//! after the lock was lost, BPMN errors, tenant isolation, incidents.

#[path = "common/backends.rs"]
mod backends;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use sutra::config::Config;
use sutra::runtime::{
    ChannelSpec, ExternalFailure, FetchRequest, ResolveOutcome, Runtime, RuntimeOptions,
    StartRequest,
};
use sutra::store::channels::{ChannelStore, IncidentFilter, Transport};
use sutra::store::AnyStore;
use sutra::time::VirtualClock;
use sutra::Code;

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime(store: AnyStore) -> (Runtime<AnyStore>, Arc<VirtualClock>) {
    let opts = RuntimeOptions::new(Config::default()).with_virtual_clock(t0());
    let vc = opts.virtual_clock.clone().unwrap();
    (Runtime::new(store, opts).unwrap(), vc)
}

/// start → Review (channel:reviews, `ext`) → end, and a BPMN error boundary.
fn process(ext: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:error id="Rejected" errorCode="REJECTED"/>
  <bpmn:process id="review" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Review"/>
    <bpmn:serviceTask id="Review" implementation="channel:reviews">
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="Review" targetRef="end"/>
    <bpmn:endEvent id="end"/>
    <bpmn:boundaryEvent id="rejected" attachedToRef="Review">
      <bpmn:errorEventDefinition errorRef="Rejected"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="rejected" targetRef="rejectedEnd"/>
    <bpmn:endEvent id="rejectedEnd"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

async fn setup(rt: &Runtime<AnyStore>, tenant: &str) {
    rt.set_channel(
        tenant,
        "reviews",
        ChannelSpec {
            transport: Transport::Pull,
            url: None,
            secret: None,
        },
    )
    .await
    .unwrap();
    rt.deploy(tenant, &process(""), &BTreeMap::new())
        .await
        .unwrap();
}

async fn start(rt: &Runtime<AnyStore>, tenant: &str, vars: Value) -> String {
    rt.start(StartRequest {
        tenant: tenant.into(),
        process_id: "review".into(),
        variables: vars.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

fn fetch(worker: &str, lock_ms: u64) -> FetchRequest {
    FetchRequest {
        worker_id: worker.into(),
        channels: vec!["reviews".into()],
        max_tasks: 10,
        lock: Duration::from_millis(lock_ms),
        wait: Duration::ZERO,
    }
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

backends::store_tests! {
    async fn a_worker_fetches_and_completes_a_task(db) {
        let (rt, _vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        let id = start(&rt, TENANT, json!({"doc": "d1"})).await;
        let tasks = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap();
        assert_eq!(tasks.len(), 1);
        let t = &tasks[0];
        assert_eq!(t.instance_id, id);
        assert_eq!(t.node, "Review");
        assert_eq!(serde_json::from_str::<Value>(&t.payload).unwrap(), json!({"doc": "d1"}));
        assert_eq!(t.claimed_by.as_deref(), Some("w1"));
        // Locked: nobody else gets it.
        assert!(rt.fetch_and_lock(TENANT, &fetch("w2", 60_000)).await.unwrap().is_empty());
        rt.complete_external(TENANT, &t.id, "w1", obj(json!({"approved": true}))).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.variables["approved"], json!(true));
        assert_eq!(db.store.get_request(&t.id).await.unwrap().unwrap().state, "DONE");
        assert!(rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().is_empty());
    }

    async fn an_expired_lock_makes_the_task_fetchable_and_the_old_holder_loses_it(db) {
        let (rt, vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        let id = start(&rt, TENANT, json!({})).await;
        let t = rt.fetch_and_lock(TENANT, &fetch("w1", 1_000)).await.unwrap().remove(0);
        vc.advance(Duration::from_millis(1_001));
        let again = rt.fetch_and_lock(TENANT, &fetch("w2", 60_000)).await.unwrap();
        assert_eq!(again.len(), 1, "fetchable again once the lock expired");
        assert_eq!(again[0].id, t.id);
        let e = rt.complete_external(TENANT, &t.id, "w1", Map::new()).await.unwrap_err();
        assert_eq!(e.code, Code::ExternalTaskLockLost);
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
        // The new holder may extend, then complete.
        rt.extend_lock(TENANT, &t.id, "w2", Duration::from_secs(60)).await.unwrap();
        let e = rt.extend_lock(TENANT, &t.id, "w1", Duration::from_secs(60)).await.unwrap_err();
        assert_eq!(e.code, Code::ExternalTaskLockLost);
        rt.complete_external(TENANT, &t.id, "w2", Map::new()).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }

    /// Worker failures spend `sutra.external-task.retries` (3), never the
    /// call's `q:retry`; spent, an incident; resolving it re-arms the task.
    async fn worker_failures_spend_their_own_retries_then_raise_an_incident(db) {
        let (rt, vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        let id = start(&rt, TENANT, json!({})).await;
        let failure = ExternalFailure { message: "scanner offline".into(), retries: None, retry_timeout: Duration::from_secs(5) };
        for left in [2, 1] {
            let t = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().remove(0);
            let after = rt.fail_external(TENANT, &t.id, "w1", &failure).await.unwrap();
            assert_eq!(after.retries, Some(left));
            assert_eq!(after.last_error.as_deref(), Some("scanner offline"));
            // Not before its retry timeout.
            assert!(rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().is_empty());
            vc.advance(Duration::from_secs(5));
        }
        let t = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().remove(0);
        let after = rt.fail_external(TENANT, &t.id, "w1", &failure).await.unwrap();
        assert_eq!(after.state, "INCIDENT");
        vc.advance(Duration::from_secs(60));
        assert!(rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().is_empty(), "an incident waits for an operator");
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "WAITING", "worker failures never fail the call");
        assert!(view.attempts.is_empty(), "nor spend its attempts");
        let incidents = rt.incidents(&IncidentFilter { tenant: Some(TENANT.into()), ..IncidentFilter::default() }).await.unwrap();
        assert_eq!(incidents.len(), 1);
        assert_eq!(incidents[0].kind, "external_task_failed");
        assert_eq!(incidents[0].message, "scanner offline");
        let (resolved, outcome) = rt.resolve_incident(TENANT, &incidents[0].id).await.unwrap();
        assert_eq!(outcome, ResolveOutcome::Rearmed);
        assert_eq!(resolved.state, "RESOLVED");
        let e = rt.resolve_incident(TENANT, &incidents[0].id).await.unwrap_err();
        assert_eq!(e.code, Code::IncidentResolved);
        let t = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().remove(0);
        assert_eq!(t.retries, Some(3), "fresh retries");
        rt.complete_external(TENANT, &t.id, "w1", Map::new()).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }

    async fn a_long_poll_wakes_when_work_arrives(db) {
        let (rt, _vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        let waiting = {
            let rt = rt.clone();
            tokio::spawn(async move {
                let mut req = fetch("w1", 60_000);
                req.wait = Duration::from_secs(60);
                let began = std::time::Instant::now();
                let got = rt.fetch_and_lock(TENANT, &req).await.unwrap();
                (got, began.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let id = start(&rt, TENANT, json!({})).await;
        let (got, waited) = tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].instance_id, id);
        assert!(waited < Duration::from_secs(30), "woken by the work, not by its timeout ({waited:?})");
    }

    /// Nothing but a worker can move a pull request: settling on the
    /// virtual clock jumps to the call's timeout (and never spins on it).
    async fn settle_jumps_past_an_unfetched_request_to_the_timeout(db) {
        let (rt, _vc) = runtime(db.store.clone());
        rt.set_channel(TENANT, "reviews", ChannelSpec { transport: Transport::Pull, url: None, secret: None }).await.unwrap();
        rt.deploy(TENANT, &process(r#"<q:timeout duration="PT1H"/>"#), &BTreeMap::new()).await.unwrap();
        let id = start(&rt, TENANT, json!({})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.error.unwrap().code, "SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT");
        assert_eq!(view.ended_at.unwrap(), t0() + chrono::Duration::hours(1));
    }

    async fn a_bpmn_error_routes_to_the_boundary(db) {
        let (rt, _vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        let id = start(&rt, TENANT, json!({})).await;
        let t = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().remove(0);
        rt.bpmn_error_external(TENANT, &t.id, "w1", "REJECTED", None).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.attempts[0].outcome, "business_error");
    }

    async fn a_tenant_cannot_fetch_or_answer_another_tenants_work(db) {
        let (rt, _vc) = runtime(db.store.clone());
        setup(&rt, TENANT).await;
        setup(&rt, "globex").await;
        let id = start(&rt, TENANT, json!({})).await;
        assert!(rt.fetch_and_lock("globex", &fetch("spy", 60_000)).await.unwrap().is_empty());
        let t = rt.fetch_and_lock(TENANT, &fetch("w1", 60_000)).await.unwrap().remove(0);
        let e = rt.complete_external("globex", &t.id, "w1", Map::new()).await.unwrap_err();
        assert_eq!(e.code, Code::ExternalTaskNotFound);
        let e = rt.unlock_external("globex", &t.id).await.unwrap_err();
        assert_eq!(e.code, Code::ExternalTaskNotFound);
        assert!(rt.incidents(&IncidentFilter { tenant: Some("globex".into()), ..IncidentFilter::default() }).await.unwrap().is_empty());
        assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
        // Unlock by its own tenant: fetchable again at once.
        rt.unlock_external(TENANT, &t.id).await.unwrap();
        assert_eq!(rt.fetch_and_lock(TENANT, &fetch("w2", 60_000)).await.unwrap().len(), 1);
    }

    /// With `q:retry`, a re-issued request is a new external task; a
    /// complete of the superseded one before the new one was fetched is
    /// RETRY_PENDING.
    async fn a_timed_out_call_reissues_a_new_task(db) {
        let (rt, vc) = runtime(db.store.clone());
        rt.set_channel(TENANT, "reviews", ChannelSpec { transport: Transport::Pull, url: None, secret: None }).await.unwrap();
        rt.deploy(TENANT, &process(r#"<q:retry maxAttempts="3" initialDelay="PT1S"/><q:timeout duration="PT10S"/>"#), &BTreeMap::new()).await.unwrap();
        let id = start(&rt, TENANT, json!({})).await;
        let t1 = rt.fetch_and_lock(TENANT, &fetch("w1", 3_600_000)).await.unwrap().remove(0);
        vc.advance(Duration::from_secs(11));
        rt.fire_due().await.unwrap();
        let e = rt.complete_external(TENANT, &t1.id, "w1", Map::new()).await.unwrap_err();
        assert_eq!(e.code, Code::ChannelCallRetryPending);
        // The backoff (1 s) ends: the call re-issues its request, a new task.
        vc.advance(Duration::from_secs(1));
        rt.fire_due().await.unwrap();
        let t2 = rt.fetch_and_lock(TENANT, &fetch("w2", 60_000)).await.unwrap().remove(0);
        assert_ne!(t2.id, t1.id);
        assert_eq!(t2.call_attempt, 2);
        rt.complete_external(TENANT, &t2.id, "w2", obj(json!({"ok": true}))).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }
}
