//! Fair lanes (issue 16, item 2): one tenant's echo latency while another
//! tenant runs fifty spinning (or sleeping) guests, through the public
//! runtime API on a real SQLite file with the default slots and lanes.
//!
//! For each load: 50 starts of tenant `hog` (`chaos` looping, or sleeping,
//! until a 10 s deadline) are in flight, then tenant `victim` starts 50 echo
//! instances one after another; their start-to-COMPLETED latencies are
//! printed beside the same starts with no load. The target: the loaded p50
//! within 2× the unloaded p50 plus one scheduling quantum (the 2 ms epoch
//! tick). A third load (issue 16, item 1): two streams of `hog` starts whose
//! gateway condition nests two comprehensions, each evaluation about ¾ of
//! the condition budget (~10–20 ms of CPU on the host, not in a guest). A
//! fourth (issue 33 item 1): four streams of another tenant's Map bombs
//! (issue 33's shape over 100,000 items, a 0.6 MB start), each started again
//! as soon as the last one completed; the target there is a victim start's
//! p99 under 50 ms. A fifth: the same with the BPMN shape of the bomb, a
//! parallel multi-instance sub-process that never waits, over the same list
//! (the same target). A sleep here only lets the load build up; nothing is
//! asserted on time.
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

/// A gateway whose condition nests two comprehensions over the start
/// variables: 140 × 140 steps, about three quarters of the condition budget.
const COSTLY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="costly" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="gw"/>
    <bpmn:exclusiveGateway id="gw" default="f3"/>
    <bpmn:sequenceFlow id="f2" sourceRef="gw" targetRef="end">
      <bpmn:conditionExpression>a.all(x, b.all(y, x + y &gt;= 0))</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="f3" sourceRef="gw" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// Issue 33 item 1's Map bomb: a Map over the list it is started with.
const MAP_BOMB: &str = r#"{"Name":"map-bomb","StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$.xs","ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}},"End":true}}}"#;

/// The BPMN shape of the Map bomb: a parallel multi-instance sub-process
/// over the list it is started with, each iteration ending at once.
const MI_BOMB: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="mi-bomb" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:subProcess id="T">
      <bpmn:multiInstanceLoopCharacteristics><bpmn:extensionElements><q:multiInstance collection="xs" element="x"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
      <bpmn:startEvent id="s0"/>
      <bpmn:sequenceFlow id="s1" sourceRef="s0" targetRef="s9"/>
      <bpmn:endEvent id="s9"/>
    </bpmn:subProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// Concurrent streams of bombs, and the items of each.
const BOMB_STREAMS: usize = 4;
const BOMB_ITEMS: u32 = 100_000;

const HOGS: usize = 50;
/// Concurrent streams of `costly` starts (one per core of this machine).
const COSTLY_STREAMS: usize = 2;
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
    start_of(rt, tenant, "echo", v).await
}

async fn start_of(rt: &Runtime<AnyStore>, tenant: &str, process: &str, v: Value) -> Result<String> {
    Ok(rt
        .start(StartRequest {
            tenant: tenant.into(),
            process_id: process.into(),
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

/// Streams of `process` bombs over `BOMB_ITEMS` items, each started again
/// once the last completed, while the victim probes: the victim's sorted
/// latencies and each completed bomb's time.
async fn bombs_beside(
    rt: &Runtime<AnyStore>,
    process: &'static str,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let xs: Vec<u32> = (0..BOMB_ITEMS).collect();
    let mut streams = Vec::new();
    for _ in 0..BOMB_STREAMS {
        let (rt, stop, v) = (rt.clone(), stop.clone(), json!({ "xs": xs }));
        streams.push(tokio::spawn(async move {
            let mut took = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let id = start_of(&rt, "hog", process, v.clone()).await?;
                rt.settle(&id).await?;
                let state = rt.inspect(&id).await?.state;
                if state != "COMPLETED" {
                    bail!("{process} {id} is {state}");
                }
                took.push(t.elapsed());
            }
            Ok::<Vec<Duration>, anyhow::Error>(took)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = probe(rt).await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut took = Vec::new();
    for s in streams {
        took.extend(s.await??);
    }
    took.sort();
    Ok((loaded, took))
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
        rt.deploy("hog", COSTLY, &BTreeMap::new()).await?;
        rt.deploy("hog", MAP_BOMB, &BTreeMap::new()).await?;
        rt.deploy("hog", MI_BOMB, &BTreeMap::new()).await?;
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
        // Streams of starts whose condition costs about ¾ of the budget.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let list: Vec<u32> = (0..140).collect();
        let mut streams = Vec::new();
        for _ in 0..COSTLY_STREAMS {
            let (rt, stop, v) = (rt.clone(), stop.clone(), json!({"a": list, "b": list}));
            streams.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let id = start_of(&rt, "hog", "costly", v.clone()).await?;
                    let state = rt.inspect(&id).await?.state;
                    if state != "COMPLETED" {
                        bail!("costly instance {id} is {state}");
                    }
                    n += 1;
                }
                Ok::<u64, anyhow::Error>(n)
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let loaded = probe(&rt).await?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut costly = 0;
        for s in streams {
            costly += s.await??;
        }
        row(
            &format!("{COSTLY_STREAMS} streams of another tenant's starts whose condition costs ¾ of the budget ({costly} starts)"),
            &loaded,
        );
        for (process, shape) in [("map-bomb", "Map bombs"), ("mi-bomb", "multi-instance bombs")] {
            let (loaded, took) = bombs_beside(&rt, process).await?;
            row(
                &format!(
                    "{BOMB_STREAMS} streams of another tenant's {shape} over {BOMB_ITEMS} items ({} completed, median {:.2} s each)",
                    took.len(),
                    took.get(took.len() / 2).map_or(0.0, Duration::as_secs_f64)
                ),
                &loaded,
            );
            println!(
                "|   target p99 < 50 ms: {} |||",
                if loaded[loaded.len() * 99 / 100] < Duration::from_millis(50) {
                    "met"
                } else {
                    "missed"
                }
            );
        }
        Ok(())
    })
}
