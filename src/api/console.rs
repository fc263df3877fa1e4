//! The web console's static files, served at `/ui/` (`/` redirects there).
//!
//! Every file is compiled into the binary (`include_bytes!` of `ui/`), so
//! the console needs no file system, CDN or network at run time. The
//! console is plain JavaScript over the public `/v1` API; the only
//! third-party code is the bpmn-js viewer bundle in `ui/vendor/` (see
//! `ui/README.md` for how it is pinned and refreshed).
//!
//! Invariants:
//! - every answer under `/ui/` carries a strict Content-Security-Policy:
//!   scripts and styles from this origin only (no inline script, no inline
//!   style, no `eval`), images from here or `data:` (the bpmn.io
//!   watermark), fetches to this origin only, no framing, no forms, no
//!   `<base>`; plus `nosniff` and `no-referrer`;
//! - an unknown file is the API's coded 404, like any unknown route.

use super::error::ApiError;
use crate::codes::Code;
use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

/// The Content-Security-Policy of every console answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

macro_rules! assets {
    ($( $path:literal => $mime:literal ),* $(,)?) => {
        /// (path under `/ui/`, content type, bytes).
        pub const ASSETS: &[(&str, &str, &[u8])] = &[
            $( ($path, $mime, include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $path))), )*
        ];
    };
}

assets! {
    "index.html" => "text/html; charset=utf-8",
    "console.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "js/app.js" => "text/javascript; charset=utf-8",
    "js/api.js" => "text/javascript; charset=utf-8",
    "js/dom.js" => "text/javascript; charset=utf-8",
    "js/diagram.js" => "text/javascript; charset=utf-8",
    "js/deployments.js" => "text/javascript; charset=utf-8",
    "js/instances.js" => "text/javascript; charset=utf-8",
    "js/instance.js" => "text/javascript; charset=utf-8",
    "js/incidents.js" => "text/javascript; charset=utf-8",
    "js/batches.js" => "text/javascript; charset=utf-8",
    "js/connections.js" => "text/javascript; charset=utf-8",
    "js/timeline.js" => "text/javascript; charset=utf-8",
    "js/tenants.js" => "text/javascript; charset=utf-8",
    "vendor/bpmn-navigated-viewer.production.min.js" => "text/javascript; charset=utf-8",
    "vendor/diagram-js.css" => "text/css; charset=utf-8",
    "vendor/bpmn-js.css" => "text/css; charset=utf-8",
}

fn asset(path: &str) -> Response {
    let Some((_, mime, bytes)) = ASSETS.iter().find(|(p, _, _)| *p == path) else {
        return ApiError::new(Code::ApiNotFound, "no such file in the console").into_response();
    };
    let mut resp = (StatusCode::OK, *bytes).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change only with the binary; revalidate rather than guess.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// `/` and `/ui`: to the console.
pub async fn to_console() -> Redirect {
    Redirect::to("/ui/")
}

/// `/ui/`: the console's page.
pub async fn index() -> Response {
    asset("index.html")
}

/// `/ui/{*path}`: one of its files.
pub async fn file(Path(path): Path<String>) -> Response {
    asset(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_no_inline_script_or_style() {
        assert!(!CSP.contains("unsafe-inline"));
        assert!(!CSP.contains("unsafe-eval"));
        assert!(CSP.contains("script-src 'self'"));
    }

    #[test]
    fn every_file_is_embedded_and_the_page_loads_only_embedded_files() {
        let index = std::str::from_utf8(ASSETS[0].2).unwrap();
        for (path, _, bytes) in ASSETS {
            assert!(!bytes.is_empty(), "{path} is empty");
        }
        for part in index.split(['"', '\'']) {
            if part.ends_with(".js") || part.ends_with(".css") {
                assert!(
                    ASSETS.iter().any(|(p, _, _)| *p == part),
                    "index.html loads {part}, which is not embedded"
                );
            }
        }
        assert!(!index.contains("<script>"), "no inline script");
        assert!(!index.contains("style="), "no inline style");
    }
}
