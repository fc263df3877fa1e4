//! Connection caps: a flood of connections (idle or not) cannot take the
//! server's file descriptors or memory.
//!
//! [`LimitedListener`] admits a connection only while the server holds fewer
//! than `max` connections in all and fewer than `per_addr` from its source
//! address; an excess connection is answered `503` with
//! `SUTRA.API.TOO_MANY_CONNECTIONS` at once and closed (its answer written
//! from a task of its own with a short timeout, so a client that never reads
//! holds nothing), and the accept loop goes straight on. An admitted
//! connection carries its permit, given back when the connection is dropped.
//!
//! Invariant: the counts are exactly the live admitted connections.

use super::conn_timeouts::{ConnActivity, ConnTimeouts, Timed};
use super::shape::{ShapedIo, ShapedListener};
use crate::codes::Code;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// How many connections the server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// In all.
    pub max: usize,
    /// From one source address.
    pub per_addr: usize,
}

impl ConnLimits {
    /// The defaults: at most 4,096 in all, and never more than the process's
    /// file-descriptor limit leaves (256 kept for the store, compiles and
    /// logs); 512 per source address.
    pub fn defaults() -> ConnLimits {
        let fds = fd_soft_limit().unwrap_or(1024);
        ConnLimits {
            max: 4096.min(fds.saturating_sub(256).max(16)),
            per_addr: 512,
        }
    }
}

/// The soft limit of open files, if it can be read.
fn fd_soft_limit() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then(|| usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
}

/// Raises the soft limit of open files to the hard one (a server's
/// connections, its store and its compiles each take descriptors); returns
/// the limit in force.
pub fn raise_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return Some(lim.rlim_max);
            }
        }
    }
    Some(lim.rlim_cur)
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_addr: HashMap<IpAddr, usize>,
}

/// An admitted connection's place, given back on drop.
pub struct Permit {
    counts: Arc<Mutex<Counts>>,
    ip: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_addr.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_addr.remove(&self.ip);
            }
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    /// Its source address holds `per_addr` connections.
    Address,
    /// The server holds `max`.
    Server,
}

fn admit(counts: &Arc<Mutex<Counts>>, limits: ConnLimits, ip: IpAddr) -> Result<Permit, Full> {
    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
    let from = c.by_addr.get(&ip).copied().unwrap_or(0);
    if from >= limits.per_addr {
        return Err(Full::Address);
    }
    if c.total >= limits.max {
        return Err(Full::Server);
    }
    c.total += 1;
    *c.by_addr.entry(ip).or_insert(0) += 1;
    Ok(Permit {
        counts: counts.clone(),
        ip,
    })
}

/// The answer an excess connection gets.
fn refusal(limits: ConnLimits, full: Full) -> Vec<u8> {
    let message = if full == Full::Address {
        format!(
            "this address holds {} connections already, the most one address may",
            limits.per_addr
        )
    } else {
        format!(
            "the server holds {} connections already, the most it takes",
            limits.max
        )
    };
    let body = serde_json::json!({
        "code": Code::ApiTooManyConnections.as_str(),
        "message": format!("{message}: close idle ones, or retry later"),
        "details": null,
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// [`ShapedListener`] under [`ConnLimits`], each admitted connection under
/// [`ConnTimeouts`] (`conn_timeouts.rs`).
pub struct LimitedListener {
    inner: ShapedListener,
    limits: ConnLimits,
    timeouts: ConnTimeouts,
    counts: Arc<Mutex<Counts>>,
}

impl LimitedListener {
    pub fn new(
        listener: tokio::net::TcpListener,
        limits: ConnLimits,
        timeouts: ConnTimeouts,
    ) -> LimitedListener {
        LimitedListener {
            inner: ShapedListener(listener),
            limits,
            timeouts,
            counts: Arc::default(),
        }
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, LimitedListener>>
    for ConnActivity
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, LimitedListener>) -> Self {
        ConnActivity(stream.io().io.activity())
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = Counted<Timed<ShapedIo<tokio::net::TcpStream>>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (mut io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let full = match admit(&self.counts, self.limits, addr.ip()) {
                Ok(permit) => {
                    return (
                        Counted {
                            io: Timed::new(io, self.timeouts),
                            _permit: permit,
                        },
                        addr,
                    )
                }
                Err(full) => full,
            };
            let answer = refusal(self.limits, full);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = io.write_all(&answer).await;
                    let _ = io.shutdown().await;
                })
                .await;
            });
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        axum::serve::Listener::local_addr(&self.inner)
    }
}

/// A connection with its permit.
pub struct Counted<T> {
    io: T,
    _permit: Permit,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_count_live_connections_in_all_and_per_address() {
        let counts = Arc::new(Mutex::new(Counts::default()));
        let limits = ConnLimits {
            max: 3,
            per_addr: 2,
        };
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = admit(&counts, limits, a).expect("first of a");
        let _a2 = admit(&counts, limits, a).expect("second of a");
        assert_eq!(
            admit(&counts, limits, a).err(),
            Some(Full::Address),
            "a is at its cap"
        );
        let _b1 = admit(&counts, limits, b).expect("b has room");
        assert_eq!(
            admit(&counts, limits, b).err(),
            Some(Full::Server),
            "the server is full"
        );
        drop(a1);
        let _a3 = admit(&counts, limits, a).expect("a's place came back");
        let c = counts.lock().unwrap();
        assert_eq!((c.total, c.by_addr[&a], c.by_addr[&b]), (3, 2, 1));
    }

    #[test]
    fn a_refusal_is_a_coded_503_that_closes() {
        let text = String::from_utf8(refusal(
            ConnLimits {
                max: 9,
                per_addr: 4,
            },
            Full::Address,
        ))
        .unwrap();
        assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
        assert!(text.contains("connection: close"), "{text}");
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["code"], "SUTRA.API.TOO_MANY_CONNECTIONS");
        assert!(body["message"].as_str().unwrap().contains("4 connections"));
    }
}
