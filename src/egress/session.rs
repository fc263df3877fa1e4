//! One attempt's outbound HTTP: the policy decision, secrets, the address
//! check, the connection to the checked address, the limits and the record.
//! A guest's wasi:http request and a host-made call go through the same
//! [`Session::send`].
//!
//! Invariants:
//! - the order is fixed: request cap, policy (host, method), placeholders
//!   (each bound to this host, else denied), resolution, the address check
//!   of every resolved address, then a connection to a checked address only
//!   (never a second resolution: DNS rebinding cannot move it);
//! - no redirect is followed: a 3xx is the response;
//! - every wait (connect, first byte, each body frame) ends at the attempt's
//!   deadline at the latest; a response body past the cap is cut with an error,
//!   never buffered whole;
//! - a request without an `Idempotency-Key` header gets the attempt's;
//! - a secret's value exists only in the request written to the socket: the
//!   record and every error hold its placeholder or its name.

use super::address::{self, Cidr};
use super::calls::{Call, CallLog, Slot};
use super::policy::{normal_host, Policy, Scheme};
use super::tls::Tls;
use crate::codes::Code;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The operator's limits on one attempt's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_requests: u32,
    pub max_response_bytes: u64,
    pub max_request_bytes: u64,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_requests: 16,
            max_response_bytes: 1 << 20,
            max_request_bytes: 1 << 20,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(30),
        }
    }
}

/// The egress service of a runtime: the ceiling, the operator's CIDRs, the
/// static host entries, the limits and TLS. Cheap to share.
pub struct Egress {
    pub ceiling: super::Ceiling,
    pub cidrs: Vec<Cidr>,
    /// Names answered without DNS (`sutra.egress.static-hosts`), still checked.
    pub static_hosts: HashMap<String, Vec<IpAddr>>,
    pub limits: Limits,
    pub tls: Tls,
}

/// Why a request was not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The policy refused it (`SUTRA.TASK.EGRESS_DENIED`); the reason.
    Denied(String),
    /// No name resolution.
    Dns(String),
    Connect(String),
    ConnectTimeout,
    FirstByteTimeout,
    Tls(String),
    /// The request body is over `sutra.egress.max-request-bytes`.
    RequestTooLarge(u64),
    Protocol(String),
}

impl Failure {
    fn reason(&self) -> String {
        match self {
            Failure::Denied(r) => r.clone(),
            Failure::Dns(m) => format!("name resolution failed: {m}"),
            Failure::Connect(m) => format!("connect failed: {m}"),
            Failure::ConnectTimeout => "connect timed out".into(),
            Failure::FirstByteTimeout => {
                "no response before the first-byte timeout or the attempt's deadline".into()
            }
            Failure::Tls(m) => format!("TLS failed: {m}"),
            Failure::RequestTooLarge(n) => {
                format!("request body over {n} bytes (sutra.egress.max-request-bytes)")
            }
            Failure::Protocol(m) => format!("HTTP error: {m}"),
        }
    }
}

/// How a response body ended early.
#[derive(Debug)]
pub enum BodyError {
    /// Past `sutra.egress.max-response-bytes`: cut.
    TooLarge(u64),
    /// The attempt's deadline passed while reading.
    Deadline,
    Hyper(hyper::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(n) => write!(f, "response body over {n} bytes: cut"),
            BodyError::Deadline => write!(f, "the attempt's deadline passed while reading"),
            BodyError::Hyper(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// A response body counted, capped and bounded by the deadline.
pub struct Capped {
    inner: hyper::body::Incoming,
    seen: u64,
    cap: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    log: CallLog,
    slot: Slot,
    started: Instant,
    done: bool,
}

impl Capped {
    fn finish(&mut self, reason: Option<String>) {
        if self.done {
            return;
        }
        self.done = true;
        let (seen, us) = (self.seen, micros(self.started));
        self.log.update(self.slot, |c| {
            c.bytes_in = seen;
            c.duration_us = us;
            if reason.is_some() {
                c.reason = reason;
            }
        });
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        self.finish(None);
    }
}

impl http_body::Body for Capped {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.finish(Some(
                "the attempt's deadline passed while reading the body".into(),
            ));
            return Poll::Ready(Some(Err(BodyError::Deadline)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                this.finish(None);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(Some(format!("reading the body failed: {e}")));
                Poll::Ready(Some(Err(BodyError::Hyper(e))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if this.seen > this.cap {
                        let cap = this.cap;
                        this.seen = cap;
                        this.finish(Some(format!(
                            "response body over {cap} bytes (sutra.egress.max-response-bytes): cut"
                        )));
                        return Poll::Ready(Some(Err(BodyError::TooLarge(cap))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }
}

/// The connection's driver: run it (spawned) while the response is read.
pub type Connection = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One attempt's egress.
pub struct Session {
    egress: Arc<Egress>,
    policy: Policy,
    /// name → value, only the secrets the grant names.
    secrets: HashMap<String, String>,
    idempotency_key: Option<String>,
    /// Set when the attempt starts (its slot granted): `start + deadline`.
    deadline: std::sync::OnceLock<Instant>,
    log: CallLog,
    sent: AtomicU32,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The placeholder of a secret.
pub fn placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

/// The secret names a text refers to with `{{secret:NAME}}`.
pub fn placeholders_in(text: &[u8]) -> Vec<String> {
    const OPEN: &[u8] = b"{{secret:";
    let mut names = Vec::new();
    let mut i = 0;
    while i + OPEN.len() <= text.len() {
        if &text[i..i + OPEN.len()] == OPEN {
            let rest = &text[i + OPEN.len()..];
            if let Some(end) = rest.windows(2).position(|w| w == b"}}") {
                names.push(String::from_utf8_lossy(&rest[..end]).into_owned());
                i += OPEN.len() + end + 2;
                continue;
            }
        }
        i += 1;
    }
    names
}

fn substitute(text: &[u8], secrets: &HashMap<String, String>) -> Vec<u8> {
    let mut out = text.to_vec();
    for (name, value) in secrets {
        let p = placeholder(name);
        if out.windows(p.len()).any(|w| w == p.as_bytes()) {
            let s = String::from_utf8_lossy(&out).replace(&p, value);
            out = s.into_bytes();
        }
    }
    out
}

impl Session {
    pub fn new(
        egress: Arc<Egress>,
        policy: Policy,
        secrets: HashMap<String, String>,
        idempotency_key: Option<String>,
    ) -> Session {
        Session {
            egress,
            policy,
            secrets,
            idempotency_key,
            deadline: std::sync::OnceLock::new(),
            log: CallLog::default(),
            sent: AtomicU32::new(0),
        }
    }

    /// The attempt's call record.
    pub fn log(&self) -> &CallLog {
        &self.log
    }

    /// The instant every wait of this session ends by (the attempt's
    /// deadline); set once, when the attempt starts.
    pub fn set_deadline(&self, at: Instant) {
        let _ = self.deadline.set(at);
    }

    fn left(&self) -> Duration {
        match self.deadline.get() {
            Some(at) => at.saturating_duration_since(Instant::now()),
            // A session used outside an attempt: bounded by the limits alone.
            None => Duration::from_secs(3600),
        }
    }

    /// Send one request. The response's body is [`Capped`]; the
    /// [`Connection`] must be polled (spawned) while it is read.
    pub async fn send<B>(
        &self,
        request: http::Request<B>,
    ) -> Result<(http::Response<Capped>, Connection), Failure>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let (mut parts, body) = request.into_parts();
        let scheme = parts
            .uri
            .scheme_str()
            .and_then(Scheme::parse)
            .unwrap_or(Scheme::Https);
        let host = normal_host(parts.uri.host().unwrap_or_default());
        let port = parts.uri.port_u16().unwrap_or(scheme.default_port());
        let mut call = Call {
            method: parts.method.to_string(),
            scheme: scheme.as_str().into(),
            host: host.clone(),
            port,
            path: parts.uri.path().to_string(),
            ..Call::default()
        };
        let deny = |call: &mut Call, reason: String| {
            call.code = Some(Code::TaskEgressDenied.as_str().into());
            call.reason = Some(reason.clone());
            call.duration_us = micros(started);
            self.log.push(std::mem::take(call));
            Failure::Denied(reason)
        };
        let n = self.sent.fetch_add(1, Ordering::Relaxed);
        let max = self.egress.limits.max_requests;
        if n >= max {
            return Err(deny(
                &mut call,
                format!("request cap: an attempt makes at most {max} requests (sutra.egress.max-requests)"),
            ));
        }
        let allowed = match self
            .policy
            .decide(parts.method.as_str(), scheme, &host, port)
        {
            Ok(a) => a,
            Err(reason) => return Err(deny(&mut call, reason)),
        };
        // The body, bounded (placeholders may be in it).
        let cap = self.egress.limits.max_request_bytes;
        let limited =
            http_body_util::Limited::new(body, usize::try_from(cap).unwrap_or(usize::MAX));
        let body = match limited.collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) => {
                let f = Failure::RequestTooLarge(cap);
                call.reason = Some(f.reason());
                call.duration_us = micros(started);
                self.log.push(call);
                return Err(f);
            }
        };
        // Every placeholder must name a secret bound to this host.
        let mut used: Vec<String> = placeholders_in(
            parts
                .uri
                .path_and_query()
                .map_or("", |p| p.as_str())
                .as_bytes(),
        );
        for v in parts.headers.values() {
            used.extend(placeholders_in(v.as_bytes()));
        }
        used.extend(placeholders_in(&body));
        used.sort();
        used.dedup();
        let target = format!("{}://{host}:{port}", scheme.as_str());
        let mut values = HashMap::new();
        for name in &used {
            if !allowed.secrets.contains(name) {
                return Err(deny(
                    &mut call,
                    format!("secret not bound: `{name}` is not bound to {target} by the grant"),
                ));
            }
            match self.secrets.get(name) {
                Some(v) => {
                    values.insert(name.clone(), v.clone());
                }
                None => {
                    return Err(deny(
                        &mut call,
                        format!(
                            "secret not bound: no secret `{name}` is set (PUT /v1/secrets/{name})"
                        ),
                    ))
                }
            }
        }
        let body = if values.is_empty() {
            body
        } else {
            let substituted = Bytes::from(substitute(&body, &values));
            if substituted.len() != body.len()
                && parts.headers.contains_key(http::header::CONTENT_LENGTH)
            {
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, substituted.len().into());
            }
            substituted
        };
        if !values.is_empty() {
            let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let pq = String::from_utf8_lossy(&substitute(pq.as_bytes(), &values)).into_owned();
            let mut b = http::Uri::builder()
                .scheme(scheme.as_str())
                .path_and_query(pq.as_str());
            if let Some(a) = parts.uri.authority() {
                b = b.authority(a.clone());
            }
            parts.uri = b.build().map_err(|e| Failure::Protocol(e.to_string()))?;
            for v in parts.headers.values_mut() {
                if !placeholders_in(v.as_bytes()).is_empty() {
                    if let Ok(nv) =
                        http::HeaderValue::from_bytes(&substitute(v.as_bytes(), &values))
                    {
                        *v = nv;
                    }
                }
            }
        }
        call.bytes_out = body.len() as u64;
        if !parts.headers.contains_key("idempotency-key") {
            if let Some(k) = self.idempotency_key.as_deref() {
                if let Ok(v) = http::HeaderValue::from_str(k) {
                    parts.headers.insert("idempotency-key", v);
                }
            }
        }
        // Resolve, check every address, connect to a checked one.
        let addrs = match self.resolve(&host, port).await {
            Ok(a) => a,
            Err(f) => {
                call.reason = Some(f.reason());
                call.duration_us = micros(started);
                self.log.push(call);
                return Err(f);
            }
        };
        let mut ok = Vec::new();
        let mut refused = None;
        for a in addrs {
            match address::check(a.ip(), &self.egress.cidrs) {
                None => ok.push(a),
                Some(r) => {
                    refused.get_or_insert(r);
                }
            }
        }
        if ok.is_empty() {
            let reason = refused.unwrap_or_else(|| format!("`{host}` resolves to no address"));
            return Err(deny(&mut call, reason));
        }
        let slot = self.log.push(call);
        let fail = |f: Failure| {
            let reason = f.reason();
            self.log.update(slot, |c| {
                c.reason = Some(reason);
                c.duration_us = micros(started);
            });
            f
        };
        let connect = self.egress.limits.connect_timeout.min(self.left());
        let stream = tokio::time::timeout(connect, connect_any(&ok))
            .await
            .map_err(|_| fail(Failure::ConnectTimeout))?
            .map_err(|e| fail(Failure::Connect(e)))?;
        // Origin-form on the wire; Host comes from the request's headers.
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        if !parts.headers.contains_key(http::header::HOST) {
            let authority = if port == scheme.default_port() {
                host.clone()
            } else {
                format!("{host}:{port}")
            };
            if let Ok(v) = http::HeaderValue::from_str(&authority) {
                parts.headers.insert(http::header::HOST, v);
            }
        }
        parts.uri = http::Uri::try_from(pq).map_err(|e| fail(Failure::Protocol(e.to_string())))?;
        let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
        let first_byte = self.egress.limits.first_byte_timeout.min(self.left());
        let exchange = async {
            let (mut sender, conn): (_, Connection) = match scheme {
                Scheme::Http => {
                    let (s, c) =
                        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                            .await
                            .map_err(|e| Failure::Protocol(e.to_string()))?;
                    (
                        s,
                        Box::pin(async move {
                            let _ = c.await;
                        }),
                    )
                }
                Scheme::Https => {
                    let tls = self
                        .egress
                        .tls
                        .connect(&host, stream)
                        .await
                        .map_err(Failure::Tls)?;
                    let (s, c) =
                        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                            .await
                            .map_err(|e| Failure::Protocol(e.to_string()))?;
                    (
                        s,
                        Box::pin(async move {
                            let _ = c.await;
                        }),
                    )
                }
            };
            let driver = tokio::spawn(conn);
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| Failure::Protocol(e.to_string()));
            Ok::<_, Failure>((response?, driver))
        };
        let (response, driver) = tokio::time::timeout(first_byte, exchange)
            .await
            .map_err(|_| fail(Failure::FirstByteTimeout))?
            .map_err(fail)?;
        let status = response.status().as_u16();
        self.log.update(slot, |c| {
            c.status = Some(status);
            c.duration_us = micros(started);
        });
        let deadline = tokio::time::Instant::now() + self.left();
        let response = response.map(|inner| Capped {
            inner,
            seen: 0,
            cap: self.egress.limits.max_response_bytes,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            log: self.log.clone(),
            slot,
            started,
            done: false,
        });
        let abort = driver.abort_handle();
        let connection: Connection = Box::pin(async move {
            struct AbortOnDrop(tokio::task::AbortHandle);
            impl Drop for AbortOnDrop {
                fn drop(&mut self) {
                    self.0.abort();
                }
            }
            let _guard = AbortOnDrop(abort);
            let _ = driver.await;
        });
        Ok((response, connection))
    }

    /// The addresses of `host`: a literal, a static entry, else DNS (once).
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Failure> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        if let Some(ips) = self.egress.static_hosts.get(host) {
            return Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let lookup = tokio::net::lookup_host((host, port));
        match tokio::time::timeout(self.egress.limits.connect_timeout.min(self.left()), lookup)
            .await
        {
            Ok(Ok(addrs)) => Ok(addrs.collect()),
            Ok(Err(e)) => Err(Failure::Dns(e.to_string())),
            Err(_) => Err(Failure::Dns("timed out".into())),
        }
    }
}

/// Connect to the first of `addrs` that answers.
async fn connect_any(addrs: &[SocketAddr]) -> Result<tokio::net::TcpStream, String> {
    let mut last = String::from("no address");
    for a in addrs {
        match tokio::net::TcpStream::connect(a).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_and_substituted() {
        assert_eq!(
            placeholders_in(b"Bearer {{secret:stripe}} and {{secret:a.b}} {{secret:open"),
            vec!["stripe".to_string(), "a.b".to_string()]
        );
        let mut s = HashMap::new();
        s.insert("stripe".to_string(), "sk_live".to_string());
        assert_eq!(
            substitute(b"Bearer {{secret:stripe}}", &s),
            b"Bearer sk_live"
        );
        assert_eq!(placeholder("x"), "{{secret:x}}");
    }
}
