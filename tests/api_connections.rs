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
