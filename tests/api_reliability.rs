//! Issue 33's reliability leftovers over real HTTP against `sutra serve`, on
//! SQLite and PostgreSQL: a start answered once committed (`?wait=false`,
//! `Prefer: respond-async`), retention `PT0S` with idempotent starts (the
//! final state answered, the key outliving its instance).

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::{Api, Db, Server};
use std::time::{Duration, Instant};

/// start → T (registered:chaos, the variables are its input) → end.
const GUARDED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="guarded" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// Each test on SQLite and on PostgreSQL.
macro_rules! on_both {
    ($( $(#[$meta:meta])* async fn $name:ident($db:ident) $body:block )*) => {
        $(
            $(#[$meta])*
            mod $name {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let $db = Db::Sqlite;
                    $body
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let $db = Db::Postgres;
                    $body
                }
            }
        )*
    };
}

async fn deploy_guarded(api: &Api) {
    let (status, body) = api
        .deploy(GUARDED, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

fn start_req(api: &Api, query: &str, variables: Value) -> reqwest::RequestBuilder {
    api.request(
        Method::POST,
        &format!("/v1/processes/guarded/instances{query}"),
    )
    .json(&json!({ "variables": variables }))
    .timeout(Duration::from_secs(20))
}

/// The instance's view, polled (bounded) until `done` holds.
async fn until(api: &Api, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, v) = api.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never settled: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

on_both! {
    /// Item 9: a start whose first task runs 4 s answers at once when the
    /// client asks (`?wait=false`, or `Prefer: respond-async`), with the
    /// instance committed and RUNNING; the task then completes it as it
    /// would have. Without the request, the start answers when it ended.
    async fn a_start_answers_once_committed_when_asked(db) {
        let Some(srv) = Server::start_on(db, &[("SUTRA_SANDBOX_DEADLINE", "PT60S")]).await else {
            return;
        };
        let api = srv.tenant("acme", json!({})).await;
        deploy_guarded(&api).await;
        let slow = json!({"do": "sleep", "ms": 4000});
        for (query, prefer) in [("?wait=false", None), ("", Some("respond-async, wait=100"))] {
            let mut req = start_req(&api, query, slow.clone());
            if let Some(p) = prefer {
                req = req.header("Prefer", p);
            }
            let asked = Instant::now();
            let resp = req.send().await.expect("the start answers");
            let took = asked.elapsed();
            eprintln!("measured: a start asked to answer at commit ({query}{prefer:?}) answered after {took:?}");
            let status = resp.status();
            let applied = resp.headers().get("preference-applied").cloned();
            let body: Value = resp.json().await.unwrap();
            assert_eq!(status, StatusCode::CREATED, "{body}");
            assert!(took < Duration::from_millis(2500), "answered after {took:?}: {body}");
            assert_eq!(body["state"], "RUNNING", "{body}");
            if prefer.is_some() {
                assert_eq!(applied.as_ref().and_then(|v| v.to_str().ok()), Some("respond-async"));
            }
            let id = body["instance"].as_str().unwrap().to_string();
            // Committed: another request sees it at once.
            let (status, seen) = api.get(&format!("/v1/instances/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{seen}");
            let done = until(&api, &id, |v| v["state"] == "COMPLETED").await;
            assert_eq!(done["variables"]["slept"], 4000, "{done}");
        }
        // Unasked, the start waits for the task.
        let asked = Instant::now();
        let resp = start_req(&api, "", json!({"do": "sleep", "ms": 1500})).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let body: Value = resp.json().await.unwrap();
        assert!(asked.elapsed() >= Duration::from_millis(1500));
        assert_eq!(body["state"], "COMPLETED", "{body}");
        // A bad value of `wait` is a clear 400.
        let resp = start_req(&api, "?wait=soon", json!({})).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    }

    /// Item 5: with retention PT0S, a start whose instance ends in its
    /// first step answers its final state (not 404); re-sending the same
    /// Idempotency-Key answers the same instance and creates no second one;
    /// the same key with another request is still refused.
    async fn retention_zero_answers_the_final_state_and_keeps_the_key(db) {
        let env = [("SUTRA_INSTANCE_RETENTION", "PT0S"), ("SUTRA_INSTANCE_IDEMPOTENCY_WINDOW", "PT1H")];
        let Some(srv) = Server::start_on(db, &env).await else {
            return;
        };
        let api = srv.tenant("acme", json!({})).await;
        deploy_guarded(&api).await;
        let vars = json!({"do": "echo", "n": 7});
        let keyed = |key: &str, vars: &Value| {
            start_req(&api, "", vars.clone()).header("Idempotency-Key", key.to_string())
        };
        let (status, first) = api.send(keyed("k-1", &vars)).await;
        assert_eq!(status, StatusCode::CREATED, "{first}");
        assert_eq!(first["state"], "COMPLETED", "{first}");
        assert_eq!(first["variables"]["n"], 7, "{first}");
        assert!(first["note"].as_str().unwrap_or("").contains("PT0S"), "{first}");
        let id = first["instance"].as_str().unwrap().to_string();
        // Deleted indeed.
        let (status, gone) = api.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");

        let (status, again) = api.send(keyed("k-1", &vars)).await;
        assert_eq!(status, StatusCode::OK, "a replay: {again}");
        assert_eq!(again["instance"], id.as_str(), "{again}");
        assert_eq!(again["state"], "COMPLETED", "{again}");
        let (status, list) = api.get("/v1/instances").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["instances"].as_array().unwrap().len(), 0, "no second instance: {list}");

        let (status, other) = api.send(keyed("k-1", &json!({"do": "echo", "n": 8}))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{other}");
        assert_eq!(other["code"], "SUTRA.RUNTIME.IDEMPOTENCY_KEY_REUSED");

        // Past the key's window, the key is free again: a new instance.
        srv.advance("PT2H").await;
        let (status, later) = api.send(keyed("k-1", &vars)).await;
        assert_eq!(status, StatusCode::CREATED, "{later}");
        assert_ne!(later["instance"], id.as_str(), "{later}");

        // Without a key, the answer is the final state too (also a FAILED
        // one, which is kept).
        let (status, plain) = api.start("guarded", json!({"do": "echo"})).await;
        assert_eq!(status, StatusCode::CREATED, "{plain}");
        assert_eq!(plain["state"], "COMPLETED", "{plain}");
    }
}

on_both! {
    /// Item 1 (SIGTERM): with a start in flight whose task sleeps for two
    /// minutes and another spinning (both hold their requests open), SIGTERM
    /// ends the server within its grace (`SUTRA_SHUTDOWN_GRACE`), not when
    /// the work ends.
    async fn sigterm_stops_the_server_within_its_grace_whatever_runs(db) {
        let env = [("SUTRA_SHUTDOWN_GRACE", "PT2S"), ("SUTRA_SANDBOX_DEADLINE", "PT600S")];
        let Some(mut srv) = Server::start_on(db, &env).await else {
            return;
        };
        let api = srv.tenant("acme", json!({})).await;
        deploy_guarded(&api).await;
        for input in [json!({"do": "sleep", "ms": 120_000}), json!({"do": "loop"})] {
            let req = api
                .request(Method::POST, "/v1/processes/guarded/instances")
                .json(&json!({ "variables": input }));
            tokio::spawn(async move {
                let _ = req.send().await;
            });
        }
        // Both run (their steps committed RUNNING).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, list) = api.get("/v1/instances?state=RUNNING").await;
            assert_eq!(status, StatusCode::OK, "{list}");
            if list["instances"].as_array().map_or(0, Vec::len) == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "never both running: {list}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let signalled = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(srv.pid() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let exited = loop {
            if let Some(status) = srv.exited() {
                break status;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(20),
                "still running {:?} after SIGTERM:\n{}",
                signalled.elapsed(),
                srv.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let took = signalled.elapsed();
        eprintln!("measured: exited {exited:?} {took:?} after SIGTERM (grace PT2S)");
        assert!(took < Duration::from_secs(10), "stopped after {took:?}");
        assert!(exited.code().is_some(), "exited, not killed: {exited:?}");
    }
}

/// A loopback TCP proxy to PostgreSQL that a test can cut (every open
/// connection dropped, new ones accepted and never answered: a database
/// that went away without a word) and restore.
struct Proxy {
    addr: String,
    cut: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Proxy {
    async fn to(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, _) = tokio::sync::watch::channel(false);
        let cut = std::sync::Arc::new(tx);
        let watch = cut.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut cut_rx = watch.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    if *cut_rx.borrow() {
                        // Accepted, never answered, held until restored.
                        let _ = cut_rx.wait_for(|c| !*c).await;
                        return;
                    }
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_rx.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Proxy { addr, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

/// Item 6: while PostgreSQL is away (a proxy that stops answering), a
/// request answers 503 `SUTRA.RUNTIME.STORE` within the acquire timeout
/// (3 s by default), not after 30 s; `/healthz` stays 200 (liveness) while
/// `/readyz` is 503; once the database is back, requests are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_answers_503_quickly_and_readiness_reports_it() {
    let Ok(pg) = std::env::var(server::PG_URL_VAR) else {
        eprintln!("skipped: {} not set", server::PG_URL_VAR);
        return;
    };
    let target = {
        let u = reqwest::Url::parse(&pg).unwrap();
        format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(5432))
    };
    let proxy = Proxy::to(target).await;
    let Some(srv) = Server::start_on_pg_via(&proxy.addr, &[]).await else {
        return;
    };
    let api = srv.tenant("acme", json!({})).await;
    let (status, list) = api.get("/v1/instances").await;
    assert_eq!(status, StatusCode::OK, "{list}");

    proxy.set_cut(true);
    for path in ["/v1/instances", "/v1/deployments"] {
        let asked = Instant::now();
        let (status, body) = api
            .send(
                api.request(Method::GET, path)
                    .timeout(Duration::from_secs(25)),
            )
            .await;
        let took = asked.elapsed();
        eprintln!("measured: {path} during the outage answered {status} after {took:?}");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(body["code"], "SUTRA.RUNTIME.STORE", "{path}: {body}");
        assert!(
            took < Duration::from_secs(8),
            "{path} answered after {took:?}"
        );
    }
    let anon = srv.anonymous();
    let (status, live) = anon.get("/healthz").await;
    assert_eq!(status, StatusCode::OK, "liveness: {live}");
    let (status, ready) = anon.get("/readyz").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "readiness: {ready}"
    );
    assert_eq!(ready["code"], "SUTRA.RUNTIME.STORE");

    proxy.set_cut(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = api.get("/v1/instances").await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served again: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, ready) = anon.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
}

/// A timer start every second → end.
const TICKING: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="ticking" isExecutable="true">
    <bpmn:startEvent id="every">
      <bpmn:timerEventDefinition><bpmn:timeCycle>R/PT1S</bpmn:timeCycle></bpmn:timerEventDefinition>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="every" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// start → T (chaos, retried every second up to 6 attempts) → end.
const RETRIED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="retried" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="6" initialDelay="PT1S" backoffCoefficient="1.0"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// How many times the one schedule of deployment `dep` fired.
async fn fires(api: &Api, dep: &str) -> u64 {
    let (status, s) = api.get(&format!("/v1/deployments/{dep}/schedules")).await;
    assert_eq!(status, StatusCode::OK, "{s}");
    s["schedules"][0]["fires"].as_u64().unwrap_or(0)
}

/// Polls `check` (bounded) until it holds.
async fn eventually<F, Fut>(what: &str, bound: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both! {
    /// Item 2: every write fails for a while (the store's write failpoint,
    /// as a full disk would): starts answer 503, the loops log their
    /// failures and back off; once writes work again, the schedule fires
    /// again, a retry that fell due during the outage runs and completes the
    /// instance, and the retention sweeper deletes what ended.
    async fn the_loops_resume_after_the_store_refused_every_write(db) {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("fail-writes");
        let flag_var = flag.display().to_string();
        let env = [
            (server::SYSTEM_CLOCK, "1"),
            ("SUTRA_FAIL_WRITES_WHILE", flag_var.as_str()),
            ("SUTRA_INSTANCE_RETENTION", "PT3S"),
            ("SUTRA_INSTANCE_RETENTION_SWEEP_INTERVAL", "PT1S"),
            ("SUTRA_LOG", "warn"),
        ];
        let Some(srv) = Server::start_on(db, &env).await else {
            return;
        };
        let api = srv.tenant("acme", json!({})).await;
        let (status, dep) = api.deploy(TICKING, &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{dep}");
        let dep = dep["deployments"][0]["id"].as_str().unwrap().to_string();
        let (status, body) = api.deploy(RETRIED, &[("chaos", common::guest_bytes("chaos"))]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        eventually("the schedule fires", Duration::from_secs(30), || {
            let api = api.clone();
            let dep = dep.clone();
            async move { fires(&api, &dep).await >= 1 }
        })
        .await;
        // Succeeds on attempt 4: attempts 2 to 4 fall due during and after the outage.
        let (status, inst) = api.start("retried", json!({"do": "fail", "until": 4})).await;
        assert_eq!(status, StatusCode::CREATED, "{inst}");
        assert_eq!(inst["state"], "WAITING", "a retry is due in 1 s: {inst}");
        let id = inst["instance"].as_str().unwrap().to_string();

        std::fs::write(&flag, b"").unwrap();
        let (status, refused) = api.start("retried", json!({"do": "echo"})).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
        assert_eq!(refused["code"], "SUTRA.RUNTIME.STORE", "{refused}");
        // The loops meet the failures (and say so), past the retry's due time.
        eventually("the poller logs its failures", Duration::from_secs(30), || {
            let log = srv.log();
            async move { log.contains("failpoint: writes fail") }
        })
        .await;
        let during = fires(&api, &dep).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(fires(&api, &dep).await, during, "no fire is recorded while writes fail");
        let log = srv.log();
        let warnings = log.matches("failpoint: writes fail").count();
        eprintln!("measured: {warnings} store failures logged from the outage's start to 2.5 s after the first");
        assert!(warnings < 200, "backed off: {warnings} failures logged in the outage");

        std::fs::remove_file(&flag).unwrap();
        eventually("the schedule fires again", Duration::from_secs(30), || {
            let api = api.clone();
            let dep = dep.clone();
            async move { fires(&api, &dep).await > during }
        })
        .await;
        // The retried instance completes (and, retention PT3S, is swept after).
        eventually("the retries run and the sweeper deletes the ended instance", Duration::from_secs(60), || {
            let api = api.clone();
            let id = id.clone();
            async move {
                let (status, v) = api.get(&format!("/v1/instances/{id}")).await;
                assert!(v["state"] != "FAILED", "{v}");
                status == StatusCode::NOT_FOUND
            }
        })
        .await;
        let (status, ok) = api.start("retried", json!({"do": "echo"})).await;
        assert_eq!(status, StatusCode::CREATED, "{ok}");
        assert_eq!(ok["state"], "COMPLETED", "{ok}");
        assert!(!srv.log().contains("non-zero transaction depth"), "{}", srv.log());
    }
}

/// Item 1 (SIGTERM) with the issue's own shape: a States-language Map over
/// 20,000 items of the variables, a step that kept a server running until
/// SIGKILL. SIGTERM sent with that start's request in flight ends the
/// server within its grace however long the step computes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_during_a_map_step() {
    use tokio::io::AsyncWriteExt;
    let mut srv = Server::start_with(&[("SUTRA_SHUTDOWN_GRACE", "PT2S")]).await;
    let api = srv.tenant("acme", json!({})).await;
    let map = json!({
        "Name": "bomb", "StartAt": "M",
        "States": {"M": {"Type": "Map", "ItemsPath": "$.xs",
            "ItemProcessor": {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}},
            "End": true}}
    });
    let (status, body) = api.deploy(&map.to_string(), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let xs: Vec<u32> = (0..20_000).collect();
    let body = json!({ "variables": { "xs": xs } }).to_string();
    let addr = srv.url.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/processes/bomb/instances HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        api.token.as_deref().unwrap(),
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body.as_bytes()).await.unwrap();
    conn.flush().await.unwrap();
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(srv.pid() as libc::pid_t, libc::SIGTERM) },
        0
    );
    loop {
        if srv.exited().is_some() {
            break;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "still running {:?} after SIGTERM:\n{}",
            signalled.elapsed(),
            srv.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = signalled.elapsed();
    eprintln!("measured: a server computing a 20,000-item Map stopped {took:?} after SIGTERM");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
}
