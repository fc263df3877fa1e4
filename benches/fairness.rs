//! Fair lanes (issue 16, item 2): one tenant's echo latency while another
//! tenant runs fifty spinning (or sleeping) guests, through the public
//! runtime API on a real SQLite file with the default slots and lanes.
//!
//! For each load: 50 starts of tenant `hog` (`chaos` looping, or sleeping,
//! until a 10 s deadline) are in flight, then tenant `victim` starts 50 echo
//! instances one after another; their start-to-COMPLETED latencies are
//! printed beside the same starts with no load. The target: the loaded p50
//! within 2× the unloaded p50 plus one scheduling quantum (the 2 ms epoch
//! tick). A sleep here only lets the load build up; nothing is asserted
//! on time.
//!
//! `cargo bench --bench fairness`

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, SqliteOptions, SqliteStore};

const ECHO: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="echo" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

const HOGS: usize = 50;
const PROBES: usize = 50;

fn chaos() -> Result<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("guest-examples/build.sh"))
        .arg("chaos")
        .current_dir(root)
        .output()
        .context("run guest-examples/build.sh")?;
    if !out.status.success() {
        bail!(
            "build.sh chaos failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read(root.join("target/guests/chaos.wasm")).context("read chaos.wasm")
}

fn vars(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

async fn start(rt: &Runtime<AnyStore>, tenant: &str, v: Value) -> Result<String> {
    Ok(rt
        .start(StartRequest {
            tenant: tenant.into(),
            process_id: "echo".into(),
            variables: vars(v),
            ..StartRequest::default()
        })
        .await?)
}

/// `PROBES` echo starts of `victim`, one after another: sorted latencies.
async fn probe(rt: &Runtime<AnyStore>) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let t = Instant::now();
        let id = start(rt, "victim", json!({"do": "echo"})).await?;
        times.push(t.elapsed());
        let state = rt.inspect(&id).await?.state;
        if state != "COMPLETED" {
            bail!("victim instance {id} is {state}");
        }
    }
    times.sort();
    Ok(times)
}

fn row(what: &str, t: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {what} | {:.2} ms | {:.2} ms | {:.2} ms |",
        ms(t[t.len() / 2]),
        ms(t[t.len() * 99 / 100]),
        ms(t[t.len() - 1])
    );
}

fn main() -> Result<()> {
    let chaos = chaos()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("fair.db");
        let store = AnyStore::Sqlite(
            SqliteStore::open_with(
                &format!("sqlite://{}", db.display()),
                SqliteOptions::default(),
            )
            .await?,
        );
        let config = Config {
            deadline: Some(sutra::time::IsoDuration(Duration::from_secs(10))),
            ..Config::default()
        };
        let mut opts = RuntimeOptions::new(config);
        opts.cache_dir = Some(dir.path().join("cache"));
        let rt = Runtime::new(store, opts)?;
        let modules = BTreeMap::from([("chaos".to_string(), chaos)]);
        for tenant in ["hog", "victim"] {
            rt.deploy(tenant, ECHO, &modules).await?;
        }
        // Warm up, then the unloaded figure.
        probe(&rt).await?;
        let quiet = probe(&rt).await?;
        println!("| victim's echo, start to COMPLETED | p50 | p99 | max |");
        println!("| --- | ---: | ---: | ---: |");
        row("no load", &quiet);
        for (load, hog) in [
            (
                "50 spinning guests of another tenant",
                json!({"do": "loop"}),
            ),
            (
                "50 sleeping guests of another tenant",
                json!({"do": "sleep", "ms": 9000}),
            ),
        ] {
            let mut hogs = Vec::new();
            for _ in 0..HOGS {
                let rt = rt.clone();
                let v = hog.clone();
                hogs.push(tokio::spawn(async move { start(&rt, "hog", v).await }));
            }
            // Let the load take its slots and lanes.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let loaded = probe(&rt).await?;
            row(load, &loaded);
            let target = quiet[quiet.len() / 2] * 2 + Duration::from_millis(2);
            println!(
                "|   target p50 ≤ 2 × {:.2} ms + 2 ms = {:.2} ms: {} |||",
                quiet[quiet.len() / 2].as_secs_f64() * 1e3,
                target.as_secs_f64() * 1e3,
                if loaded[loaded.len() / 2] <= target {
                    "met"
                } else {
                    "missed"
                }
            );
            for h in hogs {
                h.await??;
            }
        }
        Ok(())
    })
}
