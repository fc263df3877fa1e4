//! Attempt rows keep the fan-out item they ran in (issue 35 item 5,
//! migration 0025), on SQLite and PostgreSQL: after a Map, a nested Map or a
//! BPMN multi-instance activity ended — when its snapshot holds nothing per
//! item any more — every attempt inside names its item (the innermost
//! fan-out's node and the index), two items' attempts are told apart, and an
//! attempt outside any fan-out names none. Written by each write path: one
//! step at a time, and many at once (PostgreSQL's group commit writes a
//! batch's attempts with one `unnest` statement; SQLite's writer thread
//! writes a batch in one transaction).

#[path = "common/backends.rs"]
mod backends;
mod common;

use backends::{deployment, new_instance};

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, ItemRef, Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, AttemptRow, StepWrite, Store};

const TENANT: &str = "acme";

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
    Runtime::new(
        store,
        RuntimeOptions::new(Config::default()).with_virtual_clock(t0),
    )
    .unwrap()
}

fn modules() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([("chaos".to_string(), common::guest_bytes("chaos"))])
}

async fn start(rt: &Runtime<AnyStore>, process: &str, vars: Value) -> String {
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: process.into(),
        variables: vars.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

/// An attempt row as (task, item node, item index, outcome).
type Kept = (String, Option<String>, Option<i64>, String);

/// Each attempt row of `id`, in order.
async fn kept(store: &AnyStore, id: &str) -> Vec<Kept> {
    store
        .attempts(id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.node, a.item_node, a.item_index, a.outcome))
        .collect()
}

fn row(task: &str, item: Option<(&str, i64)>, outcome: &str) -> Kept {
    (
        task.to_string(),
        item.map(|(n, _)| n.to_string()),
        item.map(|(_, i)| i),
        outcome.to_string(),
    )
}

/// What the instance view says of its attempts' items.
fn view_items(view: &InstanceView) -> Vec<Option<ItemRef>> {
    view.attempts.iter().map(|a| a.item.clone()).collect()
}

/// Prep (outside) → M: a Map over `lines` whose Line task retries `Busy`
/// once → After (outside).
fn map_flow() -> Value {
    json!({
        "Name": "lines",
        "StartAt": "Prep",
        "States": {
            "Prep": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo"}, "ResultPath": "$.prep", "Next": "M"},
            "M": {
                "Type": "Map", "ItemsPath": "$.lines", "MaxConcurrency": 1,
                "ItemProcessor": {"StartAt": "Line", "States": {"Line": {
                    "Type": "Task", "Resource": "chaos",
                    "Retry": [{"ErrorEquals": ["Busy"], "IntervalSeconds": 1, "MaxAttempts": 2}],
                    "End": true
                }}},
                "ResultPath": "$.results", "Next": "After"
            },
            "After": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo"}, "End": true}
        }
    })
}

/// A Map of groups, each running Head then an inner Map over its lines.
fn nested_flow() -> Value {
    json!({
        "Name": "groups",
        "StartAt": "Outer",
        "States": {"Outer": {
            "Type": "Map", "ItemsPath": "$.groups", "MaxConcurrency": 1,
            "ItemProcessor": {"StartAt": "Head", "States": {
                "Head": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo", "lines.$": "$.lines"}, "Next": "Inner"},
                "Inner": {
                    "Type": "Map", "ItemsPath": "$.lines", "MaxConcurrency": 1,
                    "ItemProcessor": {"StartAt": "Line", "States": {"Line": {"Type": "Task", "Resource": "chaos", "End": true}}},
                    "End": true
                }
            }},
            "End": true
        }}
    })
}

/// start → Prep → T (a parallel multi-instance task over `items`) → end.
fn multi_instance(process: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="Prep" implementation="registered:chaos"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics isSequential="false">
        <bpmn:extensionElements><q:multiInstance collection="items" element="item"/></bpmn:extensionElements>
      </bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="Prep"/>
    <bpmn:sequenceFlow id="f1" sourceRef="Prep" targetRef="T"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// Creates instance `id` of deployment `dep`, RUNNING, with no attempt yet.
async fn create_running(store: &AnyStore, dep: &str, id: &str) {
    let step = StepWrite {
        snapshot: "{}".into(),
        state: "RUNNING".into(),
        updated_at: 1,
        ..StepWrite::default()
    };
    let inst = new_instance(id, dep);
    store.create_instance(&inst, &step).await.expect("create");
}

fn attempt(token: i64, node: &str, item: Option<(&str, i64)>) -> AttemptRow {
    AttemptRow {
        token,
        node: node.into(),
        attempt: 1,
        started_at: 2,
        ended_at: 3,
        outcome: "completed".into(),
        code: None,
        class: None,
        message: None,
        calls: None,
        item_node: item.map(|(n, _)| n.to_string()),
        item_index: item.map(|(_, i)| i),
    }
}

backends::store_tests! {
    /// A Map whose second item failed once: after the instance completed
    /// (its snapshot has no fan-out token left), each Line attempt names
    /// the Map and its item, item 1's two attempts apart from items 0 and
    /// 2; the tasks before and after the Map name none. The instance view
    /// says the same.
    async fn a_completed_maps_attempts_name_their_items(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &map_flow().to_string(), &modules()).await.unwrap();
        let lines = json!({"lines": [{"do": "echo"}, {"do": "fail", "until": 2, "code": "Busy"}, {"do": "echo"}]});
        let id = start(&rt, "lines", lines).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert!(view.items.is_empty(), "the snapshot keeps nothing per item: {view:?}");
        assert_eq!(
            kept(&db, &id).await,
            vec![
                row("Prep", None, "completed"),
                row("Line", Some(("M", 0)), "completed"),
                row("Line", Some(("M", 1)), "failed"),
                row("Line", Some(("M", 1)), "completed"),
                row("Line", Some(("M", 2)), "completed"),
                row("After", None, "completed"),
            ]
        );
        let item = |index| Some(ItemRef { node: "M".into(), index });
        assert_eq!(view_items(&view), vec![None, item(0), item(1), item(1), item(2), None]);
        // As JSON: `item: {node, index}`, left out outside the fan-out.
        let json = serde_json::to_value(&view.attempts).unwrap();
        assert_eq!(json[2]["item"], json!({"node": "M", "index": 1}), "{json}");
        assert!(json[0].get("item").is_none(), "{json}");
    }

    /// Nested Maps: an attempt names its innermost item — Head its outer
    /// group, Line its line within the inner Map.
    async fn an_attempt_names_its_innermost_item(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &nested_flow().to_string(), &modules()).await.unwrap();
        let groups = json!({"groups": [
            {"lines": [{"do": "echo"}]},
            {"lines": [{"do": "echo"}, {"do": "echo"}]}
        ]});
        let id = start(&rt, "groups", groups).await;
        rt.settle(&id).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
        assert_eq!(
            kept(&db, &id).await,
            vec![
                row("Head", Some(("Outer", 0)), "completed"),
                row("Line", Some(("Inner", 0)), "completed"),
                row("Head", Some(("Outer", 1)), "completed"),
                row("Line", Some(("Inner", 0)), "completed"),
                row("Line", Some(("Inner", 1)), "completed"),
            ]
        );
    }

    /// Twelve instances of a BPMN parallel multi-instance task started at
    /// once (their commits meet in the backends' batches): each keeps every
    /// item's attempt under its own index, its Prep attempt under none.
    async fn multi_instance_items_started_at_once_are_each_kept(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &multi_instance("mi"), &modules()).await.unwrap();
        let vars = json!({"do": "echo", "items": [{"do": "echo"}, {"do": "echo"}, {"do": "echo"}]});
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..12 {
            let rt = rt.clone();
            let vars = vars.clone();
            set.spawn(async move {
                let id = start(&rt, "mi", vars).await;
                rt.settle(&id).await.unwrap();
                id
            });
        }
        let mut ids = Vec::new();
        while let Some(id) = set.join_next().await {
            ids.push(id.expect("task"));
        }
        for id in &ids {
            assert_eq!(rt.inspect(id).await.unwrap().state, "COMPLETED", "{id}");
            let mut rows = kept(&db, id).await;
            // Parallel iterations end in any order.
            rows.sort();
            assert_eq!(
                rows,
                vec![
                    row("Prep", None, "completed"),
                    row("T", Some(("T#body", 0)), "completed"),
                    row("T", Some(("T#body", 1)), "completed"),
                    row("T", Some(("T#body", 2)), "completed"),
                ],
                "{id}"
            );
        }
    }

    /// Forty steps committed at once (PostgreSQL's group commit writes them
    /// in batches, their attempts in one `unnest` statement; SQLite's
    /// writer in one transaction): each instance's rows keep exactly the
    /// items its own step wrote, and a row without one reads none.
    async fn steps_committed_at_once_keep_their_attempts_items(db) {
        let dep = deployment(&db).await;
        let ids: Vec<String> = (0..40).map(|n| format!("i{n:02}")).collect();
        for id in &ids {
            create_running(&db, &dep, id).await;
        }
        let mut set = tokio::task::JoinSet::new();
        for (n, id) in ids.iter().enumerate() {
            let store = db.store.clone();
            let id = id.clone();
            let n = n as i64;
            set.spawn(async move {
                let step = StepWrite {
                    snapshot: "{}".into(),
                    state: "COMPLETED".into(),
                    updated_at: 2,
                    ended_at: Some(2),
                    attempts: vec![
                        attempt(1, "Outside", None),
                        attempt(2, "Line", Some(("M", n))),
                        attempt(3, "Line", Some(("Other", 40 + n))),
                    ],
                    ..StepWrite::default()
                };
                store.commit_step(&id, 1, &step).await.map(|()| id)
            });
        }
        while let Some(r) = set.join_next().await {
            r.expect("task").expect("commit");
        }
        for (n, id) in ids.iter().enumerate() {
            let n = n as i64;
            assert_eq!(
                kept(&db, id).await,
                vec![
                    row("Outside", None, "completed"),
                    row("Line", Some(("M", n)), "completed"),
                    row("Line", Some(("Other", 40 + n)), "completed"),
                ],
                "{id}"
            );
        }
    }

    /// Migration 0027 (SQLite: `attempts` without AUTOINCREMENT) keeps an
    /// instance's attempts in the order they were recorded — not in their
    /// tokens' order — across the migration, and when the newest attempt's
    /// instance is deleted (its id may then be given again); on SQLite no
    /// attempt writes `sqlite_sequence` any more.
    async fn attempts_stay_in_recorded_order_across_migration_0027(db) {
        let dep = deployment(&db).await;
        for id in ["x", "y"] {
            create_running(&db, &dep, id).await;
        }
        let record = |token: i64, node: &'static str| StepWrite {
            snapshot: "{}".into(),
            state: "RUNNING".into(),
            updated_at: 2,
            attempts: vec![attempt(token, node, None)],
            ..StepWrite::default()
        };
        db.commit_step("x", 1, &record(5, "C")).await.expect("x C");
        db.commit_step("y", 1, &record(1, "Y1")).await.expect("y Y1");
        // A database as 0026 left it: the table as it was, 0027 not applied.
        undo_0027(&db).await;
        let store = db.reopen().await;
        let nodes = |rows: Vec<AttemptRow>| rows.into_iter().map(|a| a.node).collect::<Vec<_>>();
        assert_eq!(nodes(store.attempts("x").await.unwrap()), ["C"]);
        store.commit_step("x", 2, &record(4, "B")).await.expect("x B");
        store.commit_step("y", 2, &record(2, "Y2")).await.expect("y Y2");
        // y holds the newest attempt; deleting it frees the largest id.
        let delete = StepWrite { snapshot: "{}".into(), state: "TERMINATED".into(), updated_at: 3, delete: true, ..StepWrite::default() };
        store.commit_step("y", 3, &delete).await.expect("delete y");
        assert!(store.attempts("y").await.unwrap().is_empty());
        store.commit_step("x", 3, &record(3, "A")).await.expect("x A");
        assert_eq!(nodes(store.attempts("x").await.unwrap()), ["C", "B", "A"]);
        if db.backend == backends::Backend::Sqlite {
            let sequenced = "SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'attempts'";
            assert_eq!(db.count(sequenced).await, 0, "no attempt writes sqlite_sequence");
            let declared = "SELECT COUNT(*) FROM sqlite_schema \
                WHERE name = 'attempts' AND sql LIKE '%AUTOINCREMENT%'";
            assert_eq!(db.count(declared).await, 0, "attempts without AUTOINCREMENT");
        }
        store.close().await;
    }
}

/// Puts `attempts` back as 0026 left it (SQLite: AUTOINCREMENT, its
/// `sqlite_sequence` row) and forgets 0027 was applied; on PostgreSQL 0027
/// changed nothing, so only the record goes.
async fn undo_0027(db: &backends::TestDb) {
    const FORGET: &str = "DELETE FROM _sqlx_migrations WHERE version = 27";
    if db.backend == backends::Backend::Sqlite {
        db.raw_execute(
            "CREATE TABLE attempts_0026 (
                id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
                instance_id TEXT NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
                token INTEGER NOT NULL, node TEXT NOT NULL, attempt INTEGER NOT NULL,
                started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL, outcome TEXT NOT NULL,
                code TEXT, message TEXT, stderr TEXT, logs TEXT, class TEXT, calls TEXT,
                input TEXT, output TEXT, item_node TEXT, item_index BIGINT,
                UNIQUE (instance_id, token, node, attempt));
            INSERT INTO attempts_0026 SELECT * FROM attempts;
            DROP TABLE attempts;
            ALTER TABLE attempts_0026 RENAME TO attempts;",
        )
        .await;
        let sequenced = db
            .count("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'attempts'")
            .await;
        assert_eq!(sequenced, 1, "the table as 0026 left it");
    }
    db.raw_execute(FORGET).await;
}
