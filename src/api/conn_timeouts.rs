//! Connection timeouts (issue 33 item 4): the server closes a connection
//! that holds a place without using it.
//!
//! - **Header-read timeout**: from the first byte of a request head (while
//!   no request of the connection is being handled) until the head is
//!   complete and its request reaches a handler. A client that trickles a
//!   head (slowloris) is closed when it runs out.
//! - **Idle timeout**: from when the connection was accepted, or last wrote
//!   an answer with no request in flight, until the next request's first
//!   byte. A connection that sends nothing is closed when it runs out.
//!
//! Invariants: a request being handled (from its head until its handler's
//! answer) is never timed out, however long it runs (a start that waits for
//! its task); the timers are checked on the connection's own reads, so they
//! cost nothing while a request runs and need no task of their own.
//!
//! How: [`Timed`] wraps the connection's I/O and keeps the two instants;
//! [`Activity`] counts the requests in flight on the connection. The router
//! enters it for every request ([`track`], a middleware), reaching the
//! connection's [`Activity`] through its connect info ([`ConnActivity`]).

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The two timeouts of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnTimeouts {
    pub header_read: Duration,
    pub idle: Duration,
}

impl Default for ConnTimeouts {
    /// 30 s for a request head, 120 s idle between requests.
    fn default() -> Self {
        ConnTimeouts {
            header_read: Duration::from_secs(30),
            idle: Duration::from_secs(120),
        }
    }
}

/// The requests of one connection: how many are in flight, how many began.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    began: AtomicU64,
}

/// A request in flight; its end on drop.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    /// A request of this connection reached its handler.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.began.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// The connect info every request carries: its connection's [`Activity`].
#[derive(Debug, Clone)]
pub struct ConnActivity(pub Arc<Activity>);

/// The middleware that marks every request in flight on its connection
/// until its handler answered (requests served without a connection, as in
/// the router's own tests, pass through).
pub async fn track(request: Request, next: Next) -> Response {
    let activity = request
        .extensions()
        .get::<ConnectInfo<ConnActivity>>()
        .map(|c| c.0 .0.clone());
    let _in_flight = activity.as_ref().map(|a| a.begin());
    next.run(request).await
}

/// A connection's I/O under [`ConnTimeouts`].
pub struct Timed<T> {
    io: T,
    timeouts: ConnTimeouts,
    activity: Arc<Activity>,
    /// Accepted, or last wrote with no request in flight.
    idle_since: Instant,
    /// The first byte of a request head not yet handed to a handler.
    head_since: Option<Instant>,
    /// `Activity::began` when `head_since` was set.
    began_seen: u64,
    timer: Pin<Box<Sleep>>,
}

impl<T> Timed<T> {
    pub fn new(io: T, timeouts: ConnTimeouts) -> Timed<T> {
        let now = Instant::now();
        Timed {
            io,
            timeouts,
            activity: Arc::default(),
            idle_since: now,
            head_since: None,
            began_seen: 0,
            timer: Box::pin(tokio::time::sleep_until(now + timeouts.idle)),
        }
    }

    /// The connection's requests (for its connect info).
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// When the connection is to be closed, if nothing comes first: none
    /// while a request is in flight.
    fn deadline(&mut self) -> Option<Instant> {
        if self.activity.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.head_since.is_some()
            && self.activity.began.load(Ordering::Acquire) != self.began_seen
        {
            // The head that started the timer reached its handler since.
            self.head_since = None;
        }
        Some(match self.head_since {
            Some(at) => at + self.timeouts.header_read,
            None => self.idle_since + self.timeouts.idle,
        })
    }

    fn timed_out(&self) -> io::Error {
        let what = match self.head_since {
            Some(_) => format!(
                "no complete request head within the header-read timeout ({} ms)",
                self.timeouts.header_read.as_millis()
            ),
            None => format!(
                "idle past the idle timeout ({} ms)",
                self.timeouts.idle.as_millis()
            ),
        };
        io::Error::new(io::ErrorKind::TimedOut, what)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Timed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() > before;
                if read
                    && this.head_since.is_none()
                    && this.activity.in_flight.load(Ordering::Acquire) == 0
                {
                    this.head_since = Some(Instant::now());
                    this.began_seen = this.activity.began.load(Ordering::Acquire);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(deadline) = this.deadline() else {
                    return Poll::Pending;
                };
                if Instant::now() >= deadline {
                    return Poll::Ready(Err(this.timed_out()));
                }
                if this.timer.deadline() != deadline {
                    this.timer.as_mut().reset(deadline);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(this.timed_out())),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T> Timed<T> {
    /// An answer (or a part of it) went out.
    fn wrote(&mut self) {
        if self.activity.in_flight.load(Ordering::Acquire) == 0 {
            self.idle_since = Instant::now();
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Timed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(done, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote();
        }
        done
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(done, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote();
        }
        done
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
