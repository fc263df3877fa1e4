//! The console's maintained counts (issue 35 item 1, migration 0024) on
//! SQLite and PostgreSQL: after every kind of change an instance goes
//! through — a start that waits, completes or fails, a message, a cancel, a
//! retry, a migration to another deployment, the sweeper — the counts by
//! state and the per-node figures the store answers from its aggregate are
//! exactly what the instances' rows and snapshots say; the error-code and
//! failed-node filters find exactly the failed instances; and instances
//! written before the migration are counted by its backfill.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{MigrateRequest, RetryMode, Runtime, RuntimeOptions, StartRequest};
use sutra::store::tenancy::TenancyStore;
use sutra::store::{AnyStore, InstanceFilter, Store};

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime_at(store: AnyStore, at: DateTime<Utc>) -> Runtime<AnyStore> {
    Runtime::new(
        store,
        RuntimeOptions::new(Config::default()).with_virtual_clock(at),
    )
    .unwrap()
}

fn modules() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([("chaos".to_string(), common::guest_bytes("chaos"))])
}

/// start → T (chaos) → wait (message `payment`) → end; `version` only
/// changes the text, so a second deploy is a new deployment.
fn flow(version: u32) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs{version}" targetNamespace="https://example.com">
  <bpmn:message id="Paid" name="payment"/>
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Paid"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

async fn start(rt: &Runtime<AnyStore>, vars: Value) -> String {
    let id = rt
        .start(StartRequest {
            tenant: TENANT.into(),
            process_id: "p".into(),
            variables: vars.as_object().cloned().unwrap(),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    rt.settle(&id).await.unwrap();
    id
}

/// The aggregate's answers equal the rows' and the snapshots': per
/// deployment its node figures, and the tenant's counts by state.
async fn assert_exact(store: &AnyStore, deployments: &[&str], when: &str) {
    for d in deployments {
        let kept = store.node_states(d).await.unwrap();
        let scanned = store.node_states_scanned(d).await.unwrap();
        assert_eq!(kept, scanned, "{when}: node figures of {d}");
    }
    let kept = store
        .instance_counts(TENANT, None, None, None)
        .await
        .unwrap();
    // Bounds that hold every id make the store count the rows themselves.
    let rows = store
        .instance_counts(TENANT, None, Some("0"), Some("~"))
        .await
        .unwrap();
    assert_eq!(kept, rows, "{when}: counts by state");
    let of_p = store
        .instance_counts(TENANT, Some("p"), None, None)
        .await
        .unwrap();
    assert_eq!(of_p, rows, "{when}: counts of process p");
    let none = store
        .instance_counts(TENANT, Some("other"), None, None)
        .await
        .unwrap();
    assert!(none.is_empty(), "{when}: another process counts nothing");
}

fn count(rows: &[(String, i64)], state: &str) -> i64 {
    rows.iter().find(|(s, _)| s == state).map_or(0, |(_, n)| *n)
}

backends::store_tests! {
    async fn the_counts_stay_exact_through_every_change_of_an_instance(db) {
        let rt = runtime_at(db.store.clone(), t0());
        let v1 = rt.deploy(TENANT, &flow(1), &modules()).await.unwrap()[0].id.clone();
        let mut waiting = Vec::new();
        for _ in 0..4 {
            waiting.push(start(&rt, json!({"do": "echo"})).await);
        }
        let failed = start(&rt, json!({"do": "fail", "code": "BAD.CARD"})).await;
        assert_exact(&db.store, &[&v1], "after the starts").await;
        let counts = db.instance_counts(TENANT, None, None, None).await.unwrap();
        assert_eq!((count(&counts, "WAITING"), count(&counts, "FAILED")), (4, 1));
        let stats = db.node_states(&v1).await.unwrap();
        assert!(stats.contains(&("T".into(), "SUCCEEDED".into(), 4)), "{stats:?}");
        assert!(stats.contains(&("T".into(), "FAILED".into(), 1)), "{stats:?}");

        // A message completes one, a cancel ends another.
        let paid = rt.correlate(TENANT, "payment", None, serde_json::Map::new()).await.unwrap();
        let waiting: Vec<String> = waiting.into_iter().filter(|w| *w != paid).collect();
        rt.cancel(&waiting[0], Some("test".into())).await.unwrap();
        assert_exact(&db.store, &[&v1], "after a message and a cancel").await;

        // The failure columns: the filters find exactly the failed one.
        let code = rt.inspect(&failed).await.unwrap().error.unwrap().code;
        let by = |error_code: Option<String>, failed_node: Option<String>| InstanceFilter {
            tenant: Some(TENANT.into()),
            error_code,
            failed_node,
            ..InstanceFilter::default()
        };
        let ids = |rows: Vec<sutra::store::InstanceRecord>| -> Vec<String> {
            rows.into_iter().map(|r| r.id).collect()
        };
        assert_eq!(ids(db.list_instances(&by(Some(code.clone()), None)).await.unwrap()), vec![failed.clone()]);
        assert_eq!(ids(db.list_instances(&by(None, Some("T".into()))).await.unwrap()), vec![failed.clone()]);
        assert!(db.list_instances(&by(Some("NO.SUCH".into()), None)).await.unwrap().is_empty());
        assert!(db.list_instances(&by(None, Some("wait".into()))).await.unwrap().is_empty());

        // A retry is one more instance (it fails again).
        let retried = rt.retry(TENANT, &failed, RetryMode::Full, None).await.unwrap();
        let _ = retried;
        assert_exact(&db.store, &[&v1], "after a retry").await;
        let again = db.list_instances(&by(Some(code.clone()), None)).await.unwrap();
        assert_eq!(again.len(), 2, "the retry failed with the same code");

        // A migration moves what a waiting and a failed instance count for
        // to the other deployment (the failed one resumes and fails there).
        let v2 = rt.deploy(TENANT, &flow(2), &modules()).await.unwrap()[0].id.clone();
        assert_ne!(v1, v2);
        let to_v2 = MigrateRequest { target: v2.clone(), mapping: BTreeMap::new() };
        rt.migrate(TENANT, &waiting[1], &to_v2).await.unwrap();
        rt.migrate(TENANT, &failed, &to_v2).await.unwrap();
        rt.settle(&failed).await.unwrap();
        assert_exact(&db.store, &[&v1, &v2], "after two migrations").await;
        let v2_nodes = db.node_states(&v2).await.unwrap();
        assert!(v2_nodes.contains(&("wait".into(), "RUNNING".into(), 1)) || v2_nodes.contains(&("wait".into(), "READY".into(), 1)), "{v2_nodes:?}");

        // Eight days on, the sweeper deletes the completed and cancelled
        // instances: they count no more.
        let later = runtime_at(db.store.clone(), t0() + chrono::Duration::days(8));
        assert_eq!(later.sweep_once().await.unwrap(), 2);
        assert_exact(&db.store, &[&v1, &v2], "after the sweep").await;
        let counts = db.instance_counts(TENANT, None, None, None).await.unwrap();
        assert_eq!(count(&counts, "COMPLETED") + count(&counts, "TERMINATED"), 0, "{counts:?}");
    }

    async fn instances_written_before_the_migration_are_counted_by_its_backfill(db) {
        let rt = runtime_at(db.store.clone(), t0());
        let v1 = rt.deploy(TENANT, &flow(1), &modules()).await.unwrap()[0].id.clone();
        start(&rt, json!({"do": "echo"})).await;
        start(&rt, json!({"do": "echo"})).await;
        let failed = start(&rt, json!({"do": "fail", "code": "BAD.CARD"})).await;
        let before = (
            db.node_states(&v1).await.unwrap(),
            db.instance_counts(TENANT, None, None, None).await.unwrap(),
        );
        // Undo migration 0024 by hand, then reopen: it runs again over rows
        // it never saw written.
        undo_0024(&db).await;
        let store = db.reopen().await;
        assert_eq!(
            (
                store.node_states(&v1).await.unwrap(),
                store.instance_counts(TENANT, None, None, None).await.unwrap()
            ),
            before
        );
        let failed_at_t = store
            .list_instances(&InstanceFilter {
                tenant: Some(TENANT.into()),
                failed_node: Some("T".into()),
                ..InstanceFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(failed_at_t.len(), 1);
        assert_eq!(failed_at_t[0].id, failed);
    }
}

/// Drops what migration 0024 made and forgets it was applied.
async fn undo_0024(db: &backends::TestDb) {
    let statements = [
        "DROP TABLE deployment_stats",
        "DROP INDEX instances_error_code",
        "DROP INDEX instances_failed_node",
        "ALTER TABLE instances DROP COLUMN error_code",
        "ALTER TABLE instances DROP COLUMN failed_node",
        "ALTER TABLE attempts DROP COLUMN input",
        "ALTER TABLE attempts DROP COLUMN output",
        "DELETE FROM _sqlx_migrations WHERE version = 24",
    ];
    db.raw_execute(&statements.join(";\n")).await;
}
