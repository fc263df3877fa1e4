//! The error shape at the two layers below the handlers: every error answer
//! is `{"code", "message", "details"}`, also those a handler never sees.
//!
//! - [`json_errors`] (the router's middleware): an error answer that is not
//!   JSON — an extractor's rejection such as a path id that is not UTF-8 —
//!   is rewritten into the shape, its status kept, with the code that status
//!   means (a 5xx never carries its text, which is only logged).
//! - [`ShapedIo`] (the connection): hyper answers a request it cannot parse
//!   (a request target over 64 KiB: 414; a header section over its buffer or
//!   with too many headers: 431; a malformed request line or header: 400)
//!   itself, with an empty body, before any router runs. The connection's
//!   writer recognises exactly those automatic answers — an error status
//!   among 400, 414 and 431 and no `content-type`, which every answer of
//!   the router has — and sends the same status with the JSON shape
//!   instead. hyper closes the connection after such an answer, so the
//!   replacement says `connection: close`.
//!
//! Invariant: nothing else a connection writes is touched; the rewrite
//! changes the bytes of one answer head and never their order.

use super::error::ApiError;
use crate::codes::Code;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes of a non-JSON error body carried into the JSON message.
const MAX_TEXT: usize = 1024;

/// The code an error status means when nothing more precise is known.
pub fn code_for(status: StatusCode) -> Code {
    match status {
        StatusCode::UNAUTHORIZED => Code::ApiUnauthorized,
        StatusCode::FORBIDDEN => Code::ApiForbidden,
        StatusCode::NOT_FOUND => Code::ApiNotFound,
        StatusCode::METHOD_NOT_ALLOWED => Code::ApiMethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => Code::ApiPayloadTooLarge,
        StatusCode::URI_TOO_LONG => Code::ApiUriTooLong,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::ApiUnsupportedMediaType,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Code::ApiHeadersTooLarge,
        s if s.is_server_error() => Code::ApiInternal,
        _ => Code::ApiMalformed,
    }
}

fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// An error answer that is not JSON, rewritten into the error shape.
pub async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let text = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(MAX_TEXT)]).into_owned())
        .unwrap_or_default();
    let code = code_for(status);
    let message = if status.is_server_error() {
        tracing::error!(%status, body = %text, "a non-JSON server error answer");
        "the server failed to answer; see its log".to_string()
    } else if text.trim().is_empty() {
        status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_string()
    } else {
        text.trim().to_string()
    };
    ApiError {
        status,
        code,
        message,
        details: Value::Null,
    }
    .into_response()
}

/// The answer that replaces hyper's automatic one for `status`.
fn replacement(status: StatusCode) -> Vec<u8> {
    let code = code_for(status);
    let message = match code {
        Code::ApiUriTooLong => "the request target (path and query) is over 64 KiB",
        Code::ApiHeadersTooLarge => {
            "the request's header section is too large (too many headers or too many bytes)"
        }
        _ => "the request line or a header is malformed",
    };
    let body = serde_json::json!({ "code": code.as_str(), "message": message, "details": null })
        .to_string();
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes()
}

/// The status of an automatic parse-error answer of hyper that `buf` starts
/// with, if it is one (see the module docs).
fn automatic_error(buf: &[u8]) -> Option<StatusCode> {
    let rest = buf
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| buf.strip_prefix(b"HTTP/1.0 "))?;
    let status = match rest.get(..4)? {
        b"400 " => StatusCode::BAD_REQUEST,
        b"414 " => StatusCode::URI_TOO_LONG,
        b"431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let typed = head.split("\r\n").any(|l| l.starts_with("content-type:"));
    (!typed).then_some(status)
}

/// A connection whose writer replaces hyper's automatic parse-error answers
/// with the JSON error shape; reads, and every other write, pass through.
pub struct ShapedIo<T> {
    inner: T,
    /// A replacement being written: (bytes, written so far, length to report).
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<T> ShapedIo<T> {
    pub fn new(inner: T) -> Self {
        ShapedIo {
            inner,
            pending: None,
        }
    }
}

impl<T: AsyncWrite + Unpin> ShapedIo<T> {
    /// Writes the pending replacement out; answers the length to report.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some((bytes, written, _)) = &mut self.pending {
            if *written >= bytes.len() {
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let report = self.pending.take().map_or(0, |(_, _, r)| r);
        Poll::Ready(Ok(report))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ShapedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ShapedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match automatic_error(buf) {
                Some(status) => self.pending = Some((replacement(status), 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.drain(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            let first = bufs.iter().find(|b| !b.is_empty());
            match first.and_then(|b| automatic_error(b)) {
                Some(status) => {
                    let total = bufs.iter().map(|b| b.len()).sum();
                    self.pending = Some((replacement(status), 0, total));
                }
                None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        self.drain(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending.is_some() {
            ready!(self.drain(cx))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending.is_some() {
            ready!(self.drain(cx))?;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A TCP listener whose connections are [`ShapedIo`].
pub struct ShapedListener(pub tokio::net::TcpListener);

impl axum::serve::Listener for ShapedListener {
    type Io = ShapedIo<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's own accept: it logs and retries accept errors.
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (ShapedIo::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn only_untyped_parse_error_heads_are_recognised() {
        let auto = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(automatic_error(auto), Some(StatusCode::URI_TOO_LONG));
        let auto = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(
            automatic_error(auto),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        let ours = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\ncontent-length: 9\r\n\r\n";
        assert_eq!(automatic_error(ours), None);
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error(ok), None);
        assert_eq!(automatic_error(b"{\"code\":1}"), None);
        assert_eq!(automatic_error(b"HTTP/1.1 414 "), None);
    }

    #[tokio::test]
    async fn the_writer_replaces_an_automatic_answer_and_passes_the_rest() {
        let mut io = ShapedIo::new(Vec::new());
        let auto = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n";
        io.write_all(auto).await.unwrap();
        io.flush().await.unwrap();
        let text = String::from_utf8(io.inner.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{text}");
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["code"], "SUTRA.API.URI_TOO_LONG");
        let mut plain = ShapedIo::new(Vec::new());
        plain.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        assert_eq!(plain.inner, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[tokio::test]
    async fn a_non_json_error_answer_gets_the_shape_and_keeps_its_status() {
        let resp = (StatusCode::BAD_REQUEST, "Invalid URL: not UTF-8").into_response();
        let resp = json_errors(resp).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert!(is_json(&resp));
        let bytes = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["code"], "SUTRA.API.MALFORMED_REQUEST");
        assert_eq!(v["message"], "Invalid URL: not UTF-8");
        let resp = json_errors((StatusCode::BAD_GATEWAY, "secret path").into_response()).await;
        let bytes = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("secret"));
    }
}
