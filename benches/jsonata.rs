//! JSONata against JSONPath (issue 34 item 6): the same Pass/Map flow
//! written in each query language — shape the input, then a Map over its
//! orders whose item selector and inner Pass compute from each item — run
//! end to end through the public runtime API (SQLite in a temporary
//! directory, the virtual clock), every instance checked before a figure is
//! printed. Figures in `benches/README.md` ("JSONata").
//!
//! `cargo bench --bench jsonata [-- ITEMS INSTANCES]` (default 20 items, 200 instances).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, SqliteStore};

fn jsonata_flow() -> Value {
    json!({
        "Name": "ata",
        "QueryLanguage": "JSONata",
        "StartAt": "Shape",
        "States": {
            "Shape": {"Type": "Pass", "Output": {"items": "{% $states.input.orders %}", "n": "{% $count($states.input.orders) %}"}, "Next": "Each"},
            "Each": {
                "Type": "Map", "Items": "{% $states.input.items %}", "FailOnPartial": true,
                "ItemSelector": {"id": "{% $states.context.Map.Item.Value.id %}", "amount": "{% $states.context.Map.Item.Value.amount %}"},
                "ItemProcessor": {"StartAt": "Tax", "States": {"Tax": {"Type": "Pass", "Output": {"id": "{% $states.input.id %}", "gross": "{% $states.input.amount + 1 %}"}, "End": true}}},
                "End": true
            }
        }
    })
}

fn jsonpath_flow() -> Value {
    json!({
        "Name": "path",
        "StartAt": "Shape",
        "States": {
            "Shape": {"Type": "Pass", "Parameters": {"items.$": "$.orders", "n.$": "States.ArrayLength($.orders)"}, "Next": "Each"},
            "Each": {
                "Type": "Map", "ItemsPath": "$.items", "FailOnPartial": true,
                "ItemSelector": {"id.$": "$$.Map.Item.Value.id", "amount.$": "$$.Map.Item.Value.amount"},
                "ItemProcessor": {"StartAt": "Tax", "States": {"Tax": {"Type": "Pass", "Parameters": {"id.$": "$.id", "gross.$": "States.MathAdd($.amount, 1)"}, "End": true}}},
                "End": true
            }
        }
    })
}

async fn measure(
    rt: &Runtime<AnyStore>,
    process: &str,
    items: usize,
    instances: usize,
) -> Duration {
    let orders: Vec<Value> = (0..items)
        .map(|i| json!({"id": format!("o{i}"), "amount": i}))
        .collect();
    let started = Instant::now();
    for _ in 0..instances {
        let id = rt
            .start(StartRequest {
                tenant: "bench".into(),
                process_id: process.into(),
                variables: json!({ "orders": orders }).as_object().cloned().unwrap(),
                ..StartRequest::default()
            })
            .await
            .unwrap();
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{process}: {view:?}");
        let out = &view.variables["output"];
        assert_eq!(
            out.as_array().map(Vec::len),
            Some(items),
            "{process}: {out}"
        );
        assert_eq!(out[items - 1]["gross"], json!(items), "{process}: {out}");
    }
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let items = args.first().copied().unwrap_or(20).max(1);
    let instances = args.get(1).copied().unwrap_or(200).max(1);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store = AnyStore::Sqlite(SqliteStore::open(&url).await.unwrap());
    let rt = Runtime::new(
        store,
        RuntimeOptions::new(Config::default()).with_virtual_clock(chrono::Utc::now()),
    )
    .unwrap();
    for def in [jsonata_flow(), jsonpath_flow()] {
        rt.deploy("bench", &def.to_string(), &BTreeMap::new())
            .await
            .unwrap();
    }
    // Warm up both.
    measure(&rt, "ata", items, 5).await;
    measure(&rt, "path", items, 5).await;
    println!("{instances} instances, each a Pass then a Map over {items} items (a selector and a Pass per item)");
    println!("| query language | total | per instance | per item |");
    println!("|---|---|---|---|");
    for (name, process) in [("JSONata", "ata"), ("JSONPath", "path")] {
        let mut runs: Vec<Duration> = (0..3)
            .map(|_| futures_block(measure(&rt, process, items, instances)))
            .collect();
        runs.sort();
        let t = runs[1];
        println!(
            "| {name} | {:.0} ms | {:.2} ms | {:.1} µs |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3 / instances as f64,
            t.as_secs_f64() * 1e6 / (instances * items) as f64
        );
    }
}

/// Run a future to completion from inside the runtime (the bench is sequential).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
