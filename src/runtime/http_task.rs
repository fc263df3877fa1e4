//! HTTP tasks (issue 31): an attempt of a task whose implementation is
//! `TaskImpl::Http` is an HTTP call the host makes through the egress
//! [`Session`](crate::egress::Session) — the grant of the reserved module
//! [`HTTP_TASK`] (`PUT /v1/egress/sutra:http`, or `sutra run --allow-host`),
//! the operator's ceiling and CIDRs, the address checks, the limits, the
//! `Idempotency-Key` and the per-attempt call record, as a guest's
//! wasi:http request.
//!
//! The request is the States language's (`model::http`): `ApiEndpoint`,
//! `Method`, `Headers`, `QueryParameters`, `RequestBody`, `Transform`,
//! `Authentication`. The result is `{StatusCode, StatusText, Headers,
//! ResponseBody}` (the body parsed when it is declared JSON). A failure is
//! one of seed 004's CALL_API names:
//!
//! | what | code | class |
//! | --- | --- | --- |
//! | 4xx | `Api.HttpClientError` | `invalid_input`; 408, 429: `rate_limit` |
//! | 5xx | `Api.HttpServerError` | `transient` |
//! | no answer before the egress timeouts, a body not ended in time | `Api.Timeout` | `timeout` |
//! | the task's own timeout (`TimeoutSeconds`, HX `<timeout>`) | the task timeout (`States.Timeout`, ...) | `timeout` |
//! | refused, DNS, TLS, a broken exchange | `Api.Refused` | `transient` |
//! | denied by the grant, the ceiling or the address checks | `Api.Refused` | `invalid_input` |
//! | connection missing / its credential unopenable / no OAuth token | `Credential.NotFound` / `.Unavailable` / `.TokenFailed` | |
//! | the input is no request, a JSON response does not parse, a body over the cap | `Mapper.Failure` | `invalid_input` |
//!
//! A 429's or 503's `Retry-After` (seconds or an HTTP date) travels with
//! the failure as `retry_after_ms`: the engine's retrier waits that long
//! (within its `MaxDelaySeconds`). The Cause holds the method, the URL
//! without its query, the status and the first [`EXCERPT_BYTES`] of the
//! body: never a header, a query or a credential.
//!
//! Invariant: an HTTP task's attempt is never speculated (`inline.rs`): its
//! step commits its attempt park before the request goes out.

use super::connections::{Authorization, Opened};
use super::output::Written;
use super::{Deployed, Runtime};
use crate::codes::{Code, ErrorClass};
use crate::egress::session::{BodyError, Failure};
use crate::egress::{CallRecord, Session};
use crate::engine::{AttemptRequest, TaskOutcome};
use crate::model::{connection_of, NodeKind, TaskImpl, HTTP_METHODS, REQUEST_FIELDS};
use crate::store::Store;
use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// The most bytes of a response body quoted in a Cause or a call record.
pub const EXCERPT_BYTES: usize = 512;

/// What the request document asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub endpoint: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub query: Vec<(String, String)>,
    pub body: Option<(Vec<u8>, &'static str)>,
    pub connection: Option<String>,
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// How arrays are URL-encoded (`Transform.RequestEncodingOptions.ArrayFormat`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum ArrayFormat {
    Indices,
    Repeat,
    Commas,
    Brackets,
}

fn form_pairs(
    prefix: &str,
    v: &Value,
    fmt: ArrayFormat,
    out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}[{k}]")
                };
                form_pairs(&key, v, fmt, out)?;
            }
        }
        Value::Array(items) => {
            if fmt == ArrayFormat::Commas {
                let parts: Option<Vec<String>> = items.iter().map(scalar).collect();
                let parts = parts.ok_or_else(|| {
                    format!("`{prefix}`: COMMAS encodes arrays of strings, numbers or booleans")
                })?;
                out.push((prefix.to_string(), parts.join(",")));
                return Ok(());
            }
            for (i, item) in items.iter().enumerate() {
                let key = match fmt {
                    ArrayFormat::Indices => format!("{prefix}[{i}]"),
                    ArrayFormat::Brackets => format!("{prefix}[]"),
                    _ => prefix.to_string(),
                };
                form_pairs(&key, item, fmt, out)?;
            }
        }
        Value::Null => out.push((prefix.to_string(), String::new())),
        other => out.push((prefix.to_string(), scalar(other).unwrap_or_default())),
    }
    Ok(())
}

/// Check a request document (the task's input or its fixed spec).
pub(crate) fn parse_request(doc: &Value) -> Result<Request, String> {
    let Some(obj) = doc.as_object() else {
        return Err(format!(
            "the task's input is not a request object ({})",
            REQUEST_FIELDS.join(", ")
        ));
    };
    if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "the request has no field `{k}` (one of {})",
            REQUEST_FIELDS.join(", ")
        ));
    }
    let endpoint = obj
        .get("ApiEndpoint")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("ApiEndpoint must be a non-empty string")?
        .to_string();
    let method = obj
        .get("Method")
        .and_then(Value::as_str)
        .ok_or("Method must be a string")?
        .to_ascii_uppercase();
    if !HTTP_METHODS.contains(&method.as_str()) {
        return Err(format!(
            "Method `{method}` is not one of {}",
            HTTP_METHODS.join(", ")
        ));
    }
    let mut headers = Vec::new();
    if let Some(h) = obj.get("Headers") {
        let m = h.as_object().ok_or("Headers must be an object")?;
        for (k, v) in m {
            let v = scalar(v).ok_or_else(|| format!("header `{k}` is not a string"))?;
            if http::HeaderName::from_bytes(k.as_bytes()).is_err()
                || http::HeaderValue::from_str(&v).is_err()
            {
                return Err(format!("header `{k}` is not a valid HTTP header"));
            }
            headers.push((k.to_ascii_lowercase(), v));
        }
    }
    let transform = obj.get("Transform");
    if let Some(t) = transform {
        let m = t.as_object().ok_or("Transform must be an object")?;
        if let Some(k) = m
            .keys()
            .find(|k| *k != "RequestBodyEncoding" && *k != "RequestEncodingOptions")
        {
            return Err(format!(
                "Transform has no field `{k}` (RequestBodyEncoding, RequestEncodingOptions)"
            ));
        }
    }
    let encoding = transform
        .and_then(|t| t.get("RequestBodyEncoding"))
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| "NONE".into());
    let fmt = match transform
        .and_then(|t| t.get("RequestEncodingOptions"))
        .and_then(|o| o.get("ArrayFormat"))
    {
        None => ArrayFormat::Indices,
        Some(v) => match v.as_str() {
            Some("INDICES") => ArrayFormat::Indices,
            Some("REPEAT") => ArrayFormat::Repeat,
            Some("COMMAS") => ArrayFormat::Commas,
            Some("BRACKETS") => ArrayFormat::Brackets,
            _ => return Err("ArrayFormat is one of INDICES, REPEAT, COMMAS, BRACKETS".into()),
        },
    };
    let mut query = Vec::new();
    if let Some(q) = obj.get("QueryParameters") {
        if !q.is_object() {
            return Err("QueryParameters must be an object".into());
        }
        form_pairs("", q, ArrayFormat::Repeat, &mut query)?;
    }
    let body = match (obj.get("RequestBody"), encoding.as_str()) {
        (None, "NONE" | "URL_ENCODED") => None,
        (Some(b), "URL_ENCODED") => {
            if !b.is_object() {
                return Err("a URL_ENCODED RequestBody must be an object".into());
            }
            let mut pairs = Vec::new();
            form_pairs("", b, fmt, &mut pairs)?;
            let text = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish();
            Some((text.into_bytes(), "application/x-www-form-urlencoded"))
        }
        (Some(Value::String(s)), "NONE") => Some((s.clone().into_bytes(), "text/plain")),
        (Some(b), "NONE") => Some((b.to_string().into_bytes(), "application/json")),
        (_, other) => {
            return Err(format!(
                "RequestBodyEncoding `{other}` is not NONE or URL_ENCODED"
            ))
        }
    };
    let connection = obj.get("Authentication").map(connection_of).transpose()?;
    Ok(Request {
        endpoint,
        method,
        headers,
        query,
        body,
        connection,
    })
}

/// The URL of a request: `endpoint` as is when absolute, else joined to the
/// connection's base; the query parameters appended.
pub(crate) fn url_of(r: &Request, base: Option<&str>) -> Result<url::Url, String> {
    let mut url = match url::Url::parse(&r.endpoint) {
        Ok(u) => u,
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            let base = base.ok_or_else(|| {
                format!(
                    "ApiEndpoint `{}` is relative and no connection gives it a base",
                    r.endpoint
                )
            })?;
            let base = if base.ends_with('/') {
                base.to_string()
            } else {
                format!("{base}/")
            };
            let base = url::Url::parse(&base).map_err(|e| format!("connection endpoint: {e}"))?;
            base.join(r.endpoint.trim_start_matches('/'))
                .map_err(|e| format!("ApiEndpoint `{}`: {e}", r.endpoint))?
        }
        Err(e) => return Err(format!("ApiEndpoint `{}`: {e}", r.endpoint)),
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("ApiEndpoint `{}` is not http(s)", r.endpoint));
    }
    if !r.query.is_empty() {
        url.query_pairs_mut().extend_pairs(r.query.iter());
    }
    Ok(url)
}

/// The URL as a Cause or a record shows it: no query, no credentials.
fn shown(url: &url::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

fn excerpt(body: &[u8]) -> String {
    let cut = body.len().min(EXCERPT_BYTES);
    let mut s = String::from_utf8_lossy(&body[..cut]).into_owned();
    if body.len() > cut {
        s.push_str("[cut]");
    }
    s
}

fn failed(code: Code, class: ErrorClass, retryable: bool, message: String) -> TaskOutcome {
    TaskOutcome::Failed {
        code: code.as_str().into(),
        class,
        retryable,
        message,
        details: None,
        retry_after_ms: None,
    }
}

fn coded(code: Code, message: String) -> TaskOutcome {
    failed(code, code.class(), code.retryable(), message)
}

/// A `Retry-After` value: delay-seconds or an HTTP date (against `now`).
fn retry_after(v: &str, now: chrono::DateTime<chrono::Utc>) -> Option<u64> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let at = chrono::DateTime::<chrono::Utc>::from(at);
    Some(u64::try_from((at - now).num_milliseconds()).unwrap_or(0))
}

/// What one exchange gave.
struct Answer {
    status: http::StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

enum CallError {
    Failure(Failure),
    Body(BodyError),
}

async fn exchange(
    session: &Session,
    r: &Request,
    url: &url::Url,
    auth: Option<(&str, &str)>,
) -> Result<Answer, CallError> {
    let mut b = http::Request::builder()
        .method(r.method.as_str())
        .uri(url.as_str());
    let mut named_type = false;
    for (k, v) in &r.headers {
        named_type |= k == "content-type";
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some((name, value)) = auth {
        b = b.header(name, value);
    }
    let body = match &r.body {
        Some((bytes, ctype)) => {
            if !named_type {
                b = b.header("content-type", *ctype);
            }
            Bytes::from(bytes.clone())
        }
        None => Bytes::new(),
    };
    let request = b
        .body(http_body_util::Full::new(body))
        .map_err(|e| CallError::Failure(Failure::Protocol(e.to_string())))?;
    let (response, conn) = session.send(request).await.map_err(CallError::Failure)?;
    let driver = tokio::spawn(conn);
    let (parts, body) = response.into_parts();
    let collected = body.collect().await;
    driver.abort();
    let body = collected.map_err(CallError::Body)?.to_bytes();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

fn headers_json(h: &http::HeaderMap) -> Value {
    let mut m = Map::new();
    for name in h.keys() {
        let values: Vec<String> = h
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        m.insert(name.as_str().to_string(), json!(values.join(", ")));
    }
    Value::Object(m)
}

fn is_json(h: &http::HeaderMap) -> bool {
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            let t = t
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            t == "application/json" || t.ends_with("+json")
        })
}

impl<S: Store> Runtime<S> {
    /// Run one attempt of an HTTP task (`req.task` is `HTTP_TASK`).
    pub(crate) async fn run_http_attempt(
        &self,
        deployed: &Deployed,
        tenant: &str,
        id: &str,
        req: &AttemptRequest,
    ) -> (TaskOutcome, Option<Written>) {
        let spec = deployed
            .process
            .find(&req.node)
            .and_then(|n| match &n.kind {
                NodeKind::ServiceTask(t) => match &t.implementation {
                    TaskImpl::Http(s) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            });
        let Some(spec) = spec else {
            let m = format!(
                "`{}` is not an HTTP task of deployment {}",
                req.node, deployed.record.id
            );
            return (coded(Code::TaskNotRegistered, m), None);
        };
        let request = match parse_request(&spec.request(&req.input)) {
            Ok(r) => r,
            Err(m) => return (coded(Code::MapperFailure, m), None),
        };
        let opened = match &request.connection {
            Some(name) => match self.open_connection(tenant, name).await {
                Ok(o) => Some((name.clone(), o)),
                Err((code, m)) => return (coded(code, m), None),
            },
            None => None,
        };
        let base = opened.as_ref().and_then(|(_, o)| o.spec.endpoint.clone());
        let url = match url_of(&request, base.as_deref()) {
            Ok(u) => u,
            Err(m) => return (coded(Code::MapperFailure, m), None),
        };
        let session = self
            .session_of(tenant, crate::model::HTTP_TASK, &req.idempotency_key)
            .await;
        let limits = self.attempt_limits(tenant).await;
        let own = req.timeout.filter(|t| *t <= limits.deadline);
        let deadline = own.unwrap_or(limits.deadline);
        let started = Instant::now();
        session.set_deadline(started + deadline);
        let entered = self.inner.running.enter(id, req.token, req.attempt);
        let call = self.call(tenant, &session, &request, &url, opened.as_ref());
        let outcome = tokio::select! {
            o = call => o,
            _ = entered.stop.stopped() => coded(
                Code::TaskInterrupted,
                "the attempt was stopped: its result is no longer wanted".into(),
            ),
        };
        drop(entered);
        // The task's own timeout ended the call: the task timed out.
        let outcome = match outcome {
            TaskOutcome::Failed { code, .. }
                if own.is_some()
                    && code == Code::ApiTimeout.as_str()
                    && started.elapsed() + Duration::from_millis(5) >= deadline =>
            {
                coded(
                    Code::TaskDeadlineExceeded,
                    format!(
                        "{} {} did not answer within the task's timeout of {} ms",
                        request.method,
                        shown(&url),
                        deadline.as_millis()
                    ),
                )
            }
            o => o,
        };
        let mut record = session.log().snapshot();
        let redact: Vec<String> = opened
            .as_ref()
            .map(|(_, o)| vec![o.spec.authorization.header().to_ascii_lowercase()])
            .unwrap_or_default();
        annotate(&mut record, &request, &redact, &outcome);
        let written = (!record.is_empty()).then(|| Written {
            calls: serde_json::to_string(&record).ok(),
            ..Written::default()
        });
        (outcome, written)
    }

    /// The exchange with its authorization (an OAuth token fetched, cached,
    /// and refreshed once on a 401), mapped to an outcome.
    async fn call(
        &self,
        tenant: &str,
        session: &Session,
        r: &Request,
        url: &url::Url,
        conn: Option<&(String, Opened)>,
    ) -> TaskOutcome {
        let mut refreshed = false;
        loop {
            let auth = match conn {
                Some((name, o)) => match self
                    .authorization(tenant, session, name, o, refreshed)
                    .await
                {
                    Ok(a) => Some(a),
                    Err(outcome) => return outcome,
                },
                None => None,
            };
            let answer = exchange(
                session,
                r,
                url,
                auth.as_ref().map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .await;
            let oauth = conn.is_some_and(|(_, o)| {
                matches!(
                    o.spec.authorization,
                    Authorization::Oauth2ClientCredentials { .. }
                )
            });
            if let Ok(a) = &answer {
                if a.status == http::StatusCode::UNAUTHORIZED && oauth && !refreshed {
                    refreshed = true;
                    continue;
                }
            }
            return self.outcome_of(r, url, answer);
        }
    }

    /// The header a connection adds: (name, value).
    async fn authorization(
        &self,
        tenant: &str,
        session: &Session,
        name: &str,
        o: &Opened,
        refresh: bool,
    ) -> Result<(String, String), TaskOutcome> {
        let b64 = base64::engine::general_purpose::STANDARD;
        Ok(match &o.spec.authorization {
            Authorization::ApiKey { header } => (header.to_ascii_lowercase(), o.credential.clone()),
            Authorization::Basic { username } => (
                "authorization".into(),
                format!(
                    "Basic {}",
                    b64.encode(format!("{username}:{}", o.credential))
                ),
            ),
            Authorization::Bearer => ("authorization".into(), format!("Bearer {}", o.credential)),
            Authorization::Oauth2ClientCredentials {
                token_url,
                client_id,
                scope,
            } => {
                let key = (tenant.to_string(), name.to_string(), o.updated_at);
                let now = self.inner.clock.now();
                let cached = if refresh {
                    self.inner.tokens.forget(&key);
                    None
                } else {
                    self.inner.tokens.get(&key, now)
                };
                let token = match cached {
                    Some(t) => t,
                    None => {
                        let (t, expires) = self
                            .fetch_token(session, name, token_url, client_id, scope, &o.credential)
                            .await?;
                        self.inner.tokens.put(key, t.clone(), now + expires);
                        t
                    }
                };
                ("authorization".into(), format!("Bearer {token}"))
            }
        })
    }

    /// Fetch an OAuth 2 client-credentials token (through the same session:
    /// the token URL is checked and granted as any request).
    async fn fetch_token(
        &self,
        session: &Session,
        name: &str,
        token_url: &str,
        client_id: &str,
        scope: &Option<String>,
        secret: &str,
    ) -> Result<(String, chrono::Duration), TaskOutcome> {
        let fail = |m: String| {
            coded(
                Code::CredentialTokenFailed,
                format!("connection `{name}`: the OAuth token endpoint {m}"),
            )
        };
        let url = url::Url::parse(token_url).map_err(|e| fail(format!("URL is invalid: {e}")))?;
        // Built before any await: the serializer is not `Send`.
        let form = {
            let mut form = form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials")
                .append_pair("client_id", client_id)
                .append_pair("client_secret", secret);
            if let Some(s) = scope {
                form.append_pair("scope", s);
            }
            form.finish()
        };
        let r = Request {
            endpoint: token_url.to_string(),
            method: "POST".into(),
            headers: vec![("accept".into(), "application/json".into())],
            query: Vec::new(),
            body: Some((form.into_bytes(), "application/x-www-form-urlencoded")),
            connection: None,
        };
        let a = match exchange(session, &r, &url, None).await {
            Ok(a) => a,
            Err(CallError::Failure(f)) => {
                return Err(fail(format!("was not reached: {}", reason(&f))))
            }
            Err(CallError::Body(e)) => return Err(fail(format!("answer was cut: {e}"))),
        };
        if !a.status.is_success() {
            // The token endpoint's body may echo the request: not quoted.
            return Err(fail(format!("answered {}", a.status)));
        }
        let v: Value =
            serde_json::from_slice(&a.body).map_err(|_| fail("answered no JSON".into()))?;
        let token = v
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| fail("answered no access_token".into()))?;
        let secs = v.get("expires_in").and_then(Value::as_i64).unwrap_or(3600);
        // Refreshed a little before it expires (at most 30 s, at most a tenth).
        let margin = (secs / 10).min(30);
        Ok((
            token.to_string(),
            chrono::Duration::seconds((secs - margin).max(0)),
        ))
    }

    fn outcome_of(
        &self,
        r: &Request,
        url: &url::Url,
        answer: Result<Answer, CallError>,
    ) -> TaskOutcome {
        let target = format!("{} {}", r.method, shown(url));
        let a = match answer {
            Ok(a) => a,
            Err(CallError::Failure(f)) => return failure_outcome(&target, &f),
            Err(CallError::Body(BodyError::Deadline)) => {
                return coded(
                    Code::ApiTimeout,
                    format!("{target}: the response body did not end in time"),
                )
            }
            Err(CallError::Body(BodyError::TooLarge(n))) => {
                return coded(
                    Code::MapperFailure,
                    format!("{target}: the response body is over {n} bytes (sutra.egress.max-response-bytes)"),
                )
            }
            Err(CallError::Body(BodyError::Hyper(e))) => {
                return coded(Code::ApiRefused, format!("{target}: reading the response failed: {e}"))
            }
        };
        let status = a.status.as_u16();
        let text = a.status.canonical_reason().unwrap_or("").to_string();
        if status >= 400 {
            let message = format!("{target} answered {status} {text}: {}", excerpt(&a.body));
            let (code, class, retryable) = match status {
                408 | 429 => (Code::ApiHttpClientError, ErrorClass::RateLimit, true),
                400..=499 => (Code::ApiHttpClientError, ErrorClass::InvalidInput, false),
                _ => (Code::ApiHttpServerError, ErrorClass::Transient, true),
            };
            let after = matches!(status, 429 | 503)
                .then(|| a.headers.get(http::header::RETRY_AFTER))
                .flatten()
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, self.inner.clock.now()));
            return TaskOutcome::Failed {
                code: code.as_str().into(),
                class,
                retryable,
                message,
                details: Some(json!({ "StatusCode": status, "StatusText": text })),
                retry_after_ms: after,
            };
        }
        let body = if a.body.is_empty() {
            Value::Null
        } else if is_json(&a.headers) {
            match serde_json::from_slice(&a.body) {
                Ok(v) => v,
                Err(e) => {
                    return coded(
                        Code::MapperFailure,
                        format!(
                            "{target} answered {status} with a body declared JSON that does not parse ({e}): {}",
                            excerpt(&a.body)
                        ),
                    )
                }
            }
        } else {
            Value::String(String::from_utf8_lossy(&a.body).into_owned())
        };
        TaskOutcome::Completed {
            output: json!({
                "StatusCode": status,
                "StatusText": text,
                "Headers": headers_json(&a.headers),
                "ResponseBody": body,
            }),
        }
    }
}

fn reason(f: &Failure) -> String {
    match f {
        Failure::Denied(r) => format!("denied: {r}"),
        Failure::Dns(m) => format!("name resolution failed: {m}"),
        Failure::Connect(m) => format!("connect failed: {m}"),
        Failure::ConnectTimeout => "connect timed out".into(),
        Failure::FirstByteTimeout => "no answer in time".into(),
        Failure::Tls(m) => format!("TLS failed: {m}"),
        Failure::RequestTooLarge(n) => format!("request body over {n} bytes"),
        Failure::Protocol(m) => format!("HTTP error: {m}"),
    }
}

fn failure_outcome(target: &str, f: &Failure) -> TaskOutcome {
    let m = format!("{target}: {}", reason(f));
    match f {
        Failure::Denied(_) => failed(Code::ApiRefused, ErrorClass::InvalidInput, false, m),
        Failure::ConnectTimeout | Failure::FirstByteTimeout => coded(Code::ApiTimeout, m),
        Failure::RequestTooLarge(_) => coded(Code::MapperFailure, m),
        Failure::Dns(_) | Failure::Connect(_) | Failure::Tls(_) | Failure::Protocol(_) => {
            coded(Code::ApiRefused, m)
        }
    }
}

/// The last call of the record (the task's own, after any token fetch)
/// gets its request headers, redacted, and the response excerpt.
fn annotate(record: &mut CallRecord, r: &Request, redact: &[String], outcome: &TaskOutcome) {
    let Some(last) = record.calls.last_mut() else {
        return;
    };
    for (k, v) in &r.headers {
        let hidden =
            redact.contains(k) || !crate::egress::session::placeholders_in(v.as_bytes()).is_empty();
        let v = if hidden {
            "[redacted]".to_string()
        } else {
            v.clone()
        };
        last.request_headers.insert(k.clone(), v);
    }
    for k in redact {
        last.request_headers.insert(k.clone(), "[redacted]".into());
    }
    last.response_excerpt = match outcome {
        TaskOutcome::Completed { output } => {
            let body = &output["ResponseBody"];
            let text = match body {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                v => Some(v.to_string()),
            };
            text.map(|t| excerpt(t.as_bytes()))
        }
        _ => None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_document_is_checked() {
        let r = parse_request(&json!({
            "ApiEndpoint": "https://api.example.com/orders",
            "Method": "post",
            "Headers": {"X-Trace": 7},
            "QueryParameters": {"a": "1", "tags": ["x", "y"]},
            "RequestBody": {"sku": "p-1"},
            "Authentication": {"ConnectionArn": "arn:aws:events:eu-west-1:1:connection/shop/abc"}
        }))
        .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.headers, vec![("x-trace".to_string(), "7".to_string())]);
        assert_eq!(r.connection.as_deref(), Some("shop"));
        assert_eq!(r.body.as_ref().unwrap().1, "application/json");
        let url = url_of(&r, None).unwrap();
        assert_eq!(
            url.as_str(),
            "https://api.example.com/orders?a=1&tags=x&tags=y"
        );
        assert_eq!(shown(&url), "https://api.example.com/orders");
        for bad in [
            json!({"Method": "GET"}),
            json!({"ApiEndpoint": "x", "Method": "FETCH"}),
            json!({"ApiEndpoint": "x", "Method": "GET", "Body": 1}),
            json!({"ApiEndpoint": "x", "Method": "GET", "Headers": {"a": {"b": 1}}}),
        ] {
            assert!(parse_request(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn url_encoded_bodies_follow_the_array_format() {
        let r = parse_request(&json!({
            "ApiEndpoint": "/charge", "Method": "POST",
            "RequestBody": {"amount": 5, "items": ["a", "b"], "meta": {"k": "v w"}},
            "Transform": {"RequestBodyEncoding": "URL_ENCODED",
                          "RequestEncodingOptions": {"ArrayFormat": "BRACKETS"}}
        }))
        .unwrap();
        let (body, ctype) = r.body.clone().unwrap();
        assert_eq!(ctype, "application/x-www-form-urlencoded");
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "amount=5&items%5B%5D=a&items%5B%5D=b&meta%5Bk%5D=v+w"
        );
        let url = url_of(&r, Some("http://127.0.0.1:9/v1")).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/v1/charge");
        assert!(url_of(&r, None).is_err(), "relative without a base");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(retry_after("7", now), Some(7000));
        assert_eq!(
            retry_after("Tue, 01 Jan 2030 00:00:03 GMT", now),
            Some(3000)
        );
        assert_eq!(retry_after("soon", now), None);
    }
}
