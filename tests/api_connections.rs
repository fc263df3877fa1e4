//! Connection floods on loopback (issue 33 item 4): idle connections beyond
//! the caps are answered 503 `SUTRA.API.TOO_MANY_CONNECTIONS` at once and
//! closed, one source address cannot take every place, and the places come
//! back when connections close. Bounded: at most 60 connections, every wait
//! with a deadline.

mod common;
#[path = "common/server.rs"]
mod server;

use server::Server;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn connect_from(ip: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// One `GET /healthz` on a fresh connection from `ip`: the status line and body.
async fn healthz_from(ip: &str, to: SocketAddr) -> String {
    let mut s = connect_from(ip, to).await;
    let _ = s
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_floods_are_refused_quickly_per_address_and_in_all() {
    let srv = Server::start_with(&[
        ("SUTRA_API_MAX_CONNECTIONS", "30"),
        ("SUTRA_API_MAX_CONNECTIONS_PER_ADDR", "10"),
    ])
    .await;
    let addr: SocketAddr = srv.url.trim_start_matches("http://").parse().unwrap();
    // Ten idle connections from one address take its places.
    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(connect_from("127.0.0.1", addr).await);
    }
    // Wait until the server admitted all ten (it answers the 11th at once).
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let answer = healthz_from("127.0.0.1", addr).await;
        if answer.contains("503") || Instant::now() > deadline {
            break answer;
        }
    };
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("SUTRA.API.TOO_MANY_CONNECTIONS"),
        "{refused}"
    );
    assert!(refused.contains("this address holds 10"), "{refused}");
    // Another source address is still served.
    let other = healthz_from("127.0.0.2", addr).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    // Fill the server: 10 more from each of two addresses.
    for ip in ["127.0.0.3", "127.0.0.4"] {
        for _ in 0..10 {
            idle.push(connect_from(ip, addr).await);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let full = loop {
        let answer = healthz_from("127.0.0.5", addr).await;
        if answer.contains("503") || Instant::now() > deadline {
            break answer;
        }
    };
    assert!(full.contains("the server holds 30"), "{full}");
    // Closing the idle connections gives the places back.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = healthz_from("127.0.0.1", addr).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "places never came back: {answer}"
        );
    }
}

/// Reads until the server closes the connection (EOF or reset); how long it took.
async fn closed_after(s: &mut TcpStream, bound: Duration) -> Option<Duration> {
    let began = Instant::now();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(bound, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    read.ok().map(|()| began.elapsed())
}

/// Issue 33 item 4: an idle connection (no byte sent) is closed at the idle
/// timeout, a trickled request head at the header-read timeout, and a kept-
/// alive connection after its answer at the idle timeout again; a request
/// that runs longer than both (a start whose task takes 3 s) is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_header_connections_are_closed_at_their_timeouts() {
    let srv = Server::start_with(&[
        ("SUTRA_API_IDLE_TIMEOUT", "PT1S"),
        ("SUTRA_API_HEADER_READ_TIMEOUT", "PT0.5S"),
    ])
    .await;
    let addr: SocketAddr = srv.url.trim_start_matches("http://").parse().unwrap();
    let bound = Duration::from_secs(15);

    // Sends nothing: closed at about 1 s.
    let mut idle = connect_from("127.0.0.1", addr).await;
    let took = closed_after(&mut idle, bound)
        .await
        .expect("an idle connection is closed");
    assert!(took >= Duration::from_millis(800), "closed early: {took:?}");

    // A head begun and never finished: closed at about 0.5 s after its first byte.
    let mut slow = connect_from("127.0.0.1", addr).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let took = closed_after(&mut slow, bound)
        .await
        .expect("a slow head is closed");
    assert!(
        took < Duration::from_millis(950),
        "the header-read timeout, not the idle one: {took:?}"
    );

    // Kept alive after an answer: closed at the idle timeout after it.
    let mut kept = connect_from("127.0.0.1", addr).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let took = closed_after(&mut kept, bound)
        .await
        .expect("a kept-alive connection is closed");
    assert!(took >= Duration::from_millis(800), "closed early: {took:?}");

    // A request that runs past both timeouts is answered.
    let api = srv.tenant("acme", serde_json::json!({})).await;
    let flow = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="slow" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;
    let (status, body) = api
        .deploy(flow, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    let (status, done) = api
        .start("slow", serde_json::json!({"do": "sleep", "ms": 3000}))
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{done}");
    assert_eq!(done["state"], "COMPLETED", "{done}");
}
