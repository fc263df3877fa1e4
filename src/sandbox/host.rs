//! What a guest sees of the host: the `sutra:task/host` interface, a deny-all
//! WASI p2 context, and the capped captures of its stderr and log lines.
//!
//! Invariant: a guest gets no preopened directory, no environment variable, no
//! argument, no network, no inherited stdio; clocks and randomness only. What
//! it writes to stderr or logs is kept within the attempt's capture caps and
//! never fails or blocks the guest (excess is dropped, not refused). Its only
//! way out is `wasi:http/outgoing-handler`, and every request goes through
//! the attempt's egress session (`crate::egress::Session`): without one (no
//! grant) each request is denied (`HttpRequestDenied`).

use super::limits::MemoryLimiter;
use super::outcome::{LogLevel, LogLine};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

wasmtime::component::bindgen!({
    path: "wit/task.wit",
    world: "task",
    imports: { default: async },
    exports: { default: async },
});

pub(crate) use self::Context as WitContext;

/// Most log lines one attempt keeps (then one "dropped" marker line).
pub(crate) const MAX_LOG_LINES: usize = 256;

/// The data of one attempt's `Store`.
pub(crate) struct HostState {
    /// Built on the guest's first WASI call: most attempts of a small task
    /// never make one, and building it costs a few allocations and RNG seeds.
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    stderr: TailCapture,
    pub(crate) limiter: MemoryLimiter,
    logs: Arc<Mutex<LogCapture>>,
    http: WasiHttpCtx,
    hooks: EgressHooks,
}

impl HostState {
    pub(crate) fn new(
        limiter: MemoryLimiter,
        stderr: TailCapture,
        logs: Arc<Mutex<LogCapture>>,
        egress: Option<Arc<crate::egress::Session>>,
    ) -> HostState {
        HostState {
            wasi: None,
            table: ResourceTable::new(),
            stderr,
            limiter,
            logs,
            http: WasiHttpCtx::new(),
            hooks: EgressHooks { session: egress },
        }
    }
}

impl HostState {
    /// A new attempt on a warm instance (`reuse.rs`): its memory cap, fresh
    /// captures (the stderr capture is emptied in place: the WASI context
    /// and the guest's stream handles keep pointing at it), no egress, a
    /// fresh wasi:http context. Returns the stderr capture.
    pub(crate) fn renew(
        &mut self,
        memory_cap: u64,
        capture_bytes: usize,
        logs: Arc<Mutex<LogCapture>>,
    ) -> TailCapture {
        self.limiter.renew(memory_cap);
        self.stderr.reset(capture_bytes);
        self.logs = logs;
        self.http = WasiHttpCtx::new();
        self.hooks.session = None;
        self.stderr.clone()
    }
}

/// wasi:http's hooks: every request goes through the attempt's egress session.
pub(crate) struct EgressHooks {
    session: Option<Arc<crate::egress::Session>>,
}

type HttpError = wasmtime_wasi_http::Error;
type Io = Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>;

fn http_error(f: crate::egress::Failure) -> HttpError {
    use crate::egress::Failure;
    match f {
        Failure::Denied(_) => HttpError::HttpRequestDenied,
        Failure::Dns(m) => HttpError::DnsError {
            rcode: Some(m),
            info_code: None,
        },
        Failure::Connect(_) => HttpError::ConnectionRefused,
        Failure::ConnectTimeout => HttpError::ConnectionTimeout,
        Failure::FirstByteTimeout => HttpError::HttpResponseTimeout,
        Failure::Tls(_) => HttpError::TlsProtocolError,
        Failure::RequestTooLarge(n) => HttpError::HttpRequestBodySize(Some(n)),
        Failure::Protocol(_) => HttpError::HttpProtocolError,
    }
}

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Io,
    ) -> Box<
        dyn std::future::Future<
                Output = Result<(http::Response<wasmtime_wasi_http::WasiBody>, Io), HttpError>,
            > + Send,
    > {
        use crate::egress::session::BodyError;
        use http_body_util::BodyExt;
        let session = self.session.clone();
        Box::new(async move {
            let Some(session) = session else {
                return Err(HttpError::HttpRequestDenied);
            };
            let (response, connection) = session.send(request).await.map_err(http_error)?;
            let response = response.map(|b| {
                b.map_err(|e| match e {
                    BodyError::TooLarge(n) => HttpError::HttpResponseBodySize(Some(n)),
                    BodyError::Deadline => HttpError::ConnectionReadTimeout,
                    BodyError::Hyper(e) => HttpError::Hyper(e),
                })
                .boxed_unsync()
            });
            let io: Io = Box::new(async move {
                connection.await;
                Ok(())
            });
            Ok((response, io))
        })
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

/// The deny-all WASI context: no preopens, no env, no args, no network, stdin
/// closed, stdout discarded, stderr captured; clocks and random from the host.
fn deny_all_wasi(stderr: TailCapture) -> WasiCtx {
    let mut b = WasiCtxBuilder::new();
    b.stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    b.build()
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let stderr = &self.stderr;
        let wasi = self
            .wasi
            .get_or_insert_with(|| deny_all_wasi(stderr.clone()));
        WasiCtxView {
            ctx: wasi,
            table: &mut self.table,
        }
    }
}

impl sutra::task::types::Host for HostState {}

impl sutra::task::host::Host for HostState {
    async fn log(&mut self, level: sutra::task::host::Level, message: String) {
        use self::sutra::task::host::Level;
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        if let Ok(mut logs) = self.logs.lock() {
            logs.push(level, message);
        }
    }
}

/// The linker every attempt instantiates through: WASI p2, wasi:http's
/// outgoing handler and types (used only by components deployed with a
/// grant, see `loader::import_policy`), plus `sutra:task/host`.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    Task::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// Log lines of one attempt, capped in count and bytes.
#[derive(Debug)]
pub(crate) struct LogCapture {
    lines: Vec<LogLine>,
    bytes: usize,
    max_bytes: usize,
    dropped: usize,
}

impl LogCapture {
    pub(crate) fn new(max_bytes: usize) -> Self {
        LogCapture {
            lines: Vec::new(),
            bytes: 0,
            max_bytes,
            dropped: 0,
        }
    }

    fn push(&mut self, level: LogLevel, message: String) {
        if self.lines.len() >= MAX_LOG_LINES
            || self.bytes.saturating_add(message.len()) > self.max_bytes
        {
            self.dropped += 1;
            return;
        }
        self.bytes += message.len();
        self.lines.push(LogLine { level, message });
    }

    /// The kept lines, plus a marker line if any were dropped.
    pub(crate) fn take(&mut self) -> Vec<LogLine> {
        let mut lines = std::mem::take(&mut self.lines);
        if self.dropped > 0 {
            lines.push(LogLine {
                level: LogLevel::Warn,
                message: format!(
                    "[{} more log lines dropped: over the capture cap]",
                    self.dropped
                ),
            });
        }
        lines
    }
}

/// A guest output stream that keeps only its last `cap` bytes. Writes never
/// fail and never block: bytes past the cap push the oldest ones out.
#[derive(Debug, Clone)]
pub(crate) struct TailCapture {
    inner: Arc<Mutex<Tail>>,
}

#[derive(Debug)]
struct Tail {
    buf: VecDeque<u8>,
    cap: usize,
    dropped: u64,
}

impl TailCapture {
    pub(crate) fn new(cap: usize) -> Self {
        TailCapture {
            inner: Arc::new(Mutex::new(Tail {
                buf: VecDeque::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    /// Empty it, with a new cap (a new attempt on a warm instance).
    pub(crate) fn reset(&self, cap: usize) {
        if let Ok(mut t) = self.inner.lock() {
            t.buf.clear();
            t.cap = cap;
            t.dropped = 0;
        }
    }

    fn append(&self, bytes: &[u8]) {
        let Ok(mut t) = self.inner.lock() else { return };
        let t = &mut *t;
        let keep_from_input = bytes.len().min(t.cap);
        let skipped = bytes.len() - keep_from_input;
        let overflow = (t.buf.len() + keep_from_input).saturating_sub(t.cap);
        t.buf.drain(..overflow);
        t.buf.extend(&bytes[skipped..]);
        t.dropped = t.dropped.saturating_add((skipped + overflow) as u64);
    }

    /// The kept text (lossy UTF-8), prefixed by a marker if bytes were dropped.
    pub(crate) fn text(&self) -> String {
        let Ok(t) = self.inner.lock() else {
            return String::new();
        };
        let (a, b) = t.buf.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        let text = String::from_utf8_lossy(&bytes);
        if t.dropped > 0 {
            format!("[{} earlier bytes dropped]\n{text}", t.dropped)
        } else {
            text.into_owned()
        }
    }
}

impl IsTerminal for TailCapture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TailCapture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// How much a guest may write in one go (it may write again at once).
const WRITE_BUDGET: usize = 64 * 1024;

#[wasmtime_wasi::async_trait]
impl Pollable for TailCapture {
    async fn ready(&mut self) {}
}

impl OutputStream for TailCapture {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BUDGET)
    }
}

impl tokio::io::AsyncWrite for TailCapture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.append(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_capture_keeps_the_last_bytes_and_counts_the_rest() {
        let t = TailCapture::new(8);
        t.append(b"hello ");
        assert_eq!(t.text(), "hello ");
        t.append(b"world!");
        assert_eq!(t.text(), "[4 earlier bytes dropped]\no world!");
        t.append(b"0123456789");
        assert_eq!(t.text(), "[14 earlier bytes dropped]\n23456789");
    }

    #[test]
    fn log_capture_caps_count_and_bytes() {
        let mut l = LogCapture::new(10);
        l.push(LogLevel::Info, "12345".into());
        l.push(LogLevel::Warn, "123456".into());
        l.push(LogLevel::Error, "12345".into());
        let lines = l.take();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].message, "12345");
        assert_eq!(lines[1].level, LogLevel::Error);
        assert!(lines[2].message.contains("1 more log lines dropped"));

        let mut l = LogCapture::new(usize::MAX);
        for _ in 0..MAX_LOG_LINES + 5 {
            l.push(LogLevel::Info, "x".into());
        }
        let lines = l.take();
        assert_eq!(lines.len(), MAX_LOG_LINES + 1);
        assert!(lines[MAX_LOG_LINES].message.contains("5 more"));
    }
}
