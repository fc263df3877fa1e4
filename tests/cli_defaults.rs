//! What a newcomer expects without reading the flags: `sutra serve` answers
//! where the client verbs look, a client that reaches something else says so,
//! curl's default body type works, `sutra run` on a named database makes its
//! tenant visible to a server, and `--state COMPENSATED` is a state.

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::{json, Value};
use server::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

fn sutra() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
}

/// `sutra serve` without `--listen` serves the API and the console on
/// 127.0.0.1:8080, the client verbs' default `--server`.
#[test]
fn serve_answers_on_the_client_verbs_default_address() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let mut child = sutra()
        .args(["serve", "--db", &db])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The client verbs find it with no --server: an unauthenticated listing
    // is the server's own coded 401, not "cannot connect".
    let answer = if first.contains("listening on http://127.0.0.1:8080") {
        let out = sutra().args(["instances"]).output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    } else {
        String::new()
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        first.contains("listening on http://127.0.0.1:8080"),
        "serve's first line: {first:?} (is port 8080 taken on this machine?)"
    );
    assert!(
        answer.contains("SUTRA.API.UNAUTHORIZED") || answer.contains("(HTTP 401)"),
        "{answer}"
    );
    // --no-listen: no API, said so.
    let out = sutra()
        .args([
            "serve",
            "--no-listen",
            "--listen",
            "127.0.0.1:0",
            "--db",
            &db,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--listen and --no-listen conflict"
    );
}

/// Liveness and readiness: `/healthz` says the process serves, `/readyz`
/// that the store answered a read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_the_store_beside_liveness() {
    let srv = Server::start().await;
    let anon = srv.anonymous();
    let (status, body) = anon.get("/healthz").await;
    assert_eq!(status.as_u16(), 200, "{body}");
    let (status, body) = anon.get("/readyz").await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["store"], "ok", "{body}");
}

/// A server that is not Sutra: the client says so instead of printing HTML.
#[test]
fn a_client_that_reaches_something_else_says_it_is_not_sutra() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let body = "<html>It works!</html>";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let out = sutra()
        .args(["instances", "--server", &format!("http://{addr}")])
        .output()
        .unwrap();
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not the Sutra API"), "{stderr}");
    assert!(
        stderr.contains("It works!"),
        "an excerpt of what answered: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_body_sent_as_curls_default_type_is_read_as_json() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let def = r#"{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}"#;
    let (status, body) = api.deploy(def, &[]).await;
    assert!(status.is_success(), "{body}");
    let process = body["deployments"][0]["process"]
        .as_str()
        .unwrap()
        .to_string();
    // curl -d '{"variables": ...}' without -H content-type.
    let req = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/processes/{process}/instances"),
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#"{"variables": {"a": 1}}"#);
    let (status, body) = api.send(req).await;
    assert!(status.is_success(), "{status}: {body}");
    assert_eq!(body["state"], "COMPLETED", "{body}");
    // A form that is not JSON stays refused, with the API's shape.
    let req = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/processes/{process}/instances"),
        )
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1&b=2");
    let (status, body) = api.send(req).await;
    assert_eq!(status.as_u16(), 400, "{body}");
    assert_eq!(body["code"], "SUTRA.API.MALFORMED_REQUEST", "{body}");
    // Any other declared type: 415.
    let req = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/processes/{process}/instances"),
        )
        .header("content-type", "text/plain")
        .body(r#"{"variables": {}}"#);
    let (status, _) = api.send(req).await;
    assert_eq!(status.as_u16(), 415);
}

/// `sutra run --db FILE` creates the tenant `default` with a key (printed
/// once), so `sutra serve` on that file shows the run to that key at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_runs_tenant_is_visible_to_a_server_on_the_same_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("local.db").display());
    let def = dir.path().join("p.asl.json");
    std::fs::write(
        &def,
        r#"{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}"#,
    )
    .unwrap();
    let run = sutra()
        .args([
            "run",
            def.to_str().unwrap(),
            "--db",
            &db,
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let id = serde_json::from_slice::<Value>(&run.stdout).unwrap()["instance"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        stderr.starts_with(&format!("instance {id}")),
        "the id comes first: {stderr}"
    );
    let key = stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("sutra_"))
        .unwrap_or_else(|| panic!("no key printed: {stderr}"))
        .to_string();
    // A second run says nothing of keys.
    let again = sutra()
        .args(["run", def.to_str().unwrap(), "--db", &db])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains("sutra_"));
    let mut serve = sutra()
        .args(["serve", "--db", &db, "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let shown = sutra()
        .args([
            "inspect", &id, "--server", &url, "--token", &key, "--format", "json",
        ])
        .output()
        .unwrap();
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let v: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(v["state"], "COMPLETED");
}

#[test]
fn instances_takes_every_state_an_instance_can_be_in() {
    // Parsed before any request is made: a server that is not there answers
    // "cannot connect" (exit 1), an unknown state is a usage error (exit 2).
    let out = sutra()
        .args([
            "instances",
            "--state",
            "compensated",
            "--server",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = sutra()
        .args([
            "instances",
            "--state",
            "nope",
            "--server",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
