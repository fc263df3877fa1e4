//! Request parsing that answers in the API's error shape: JSON bodies
//! (unknown fields refused), query strings, path ids, and the fallbacks for
//! unknown routes and methods.
//!
//! Invariant: every malformed input is a 4xx with a code — bad JSON or an
//! unknown field → 400 `SUTRA.API.MALFORMED_REQUEST`, a non-JSON content type
//! → 415 (a JSON body sent as `application/x-www-form-urlencoded`, curl's
//! default for `-d`, is read as JSON), a body over its cap → 413 — never a 5xx, never a plain-text answer.

use super::error::ApiError;
use crate::codes::Code;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

/// A JSON body; an empty body is `T::default()`.
#[derive(Debug, Clone, Default)]
pub struct ApiJson<T>(pub T);

fn body_error(e: axum::extract::rejection::BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::ApiPayloadTooLarge,
            "the body is over this route's size cap",
        )
    } else {
        ApiError::malformed(format!("cannot read the body: {}", e.body_text()))
    }
}

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                let essence = v
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase();
                // curl's `-d` sends a JSON body as a form unless told otherwise:
                // such a body is taken when it is JSON (docs' curl lines work as
                // written); any other declared type is refused.
                essence == "application/json"
                    || essence.ends_with("+json")
                    || essence == "application/x-www-form-urlencoded"
            });
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(ApiJson(T::default()));
        }
        if json_type == Some(false) {
            return Err(ApiError::new(
                Code::ApiUnsupportedMediaType,
                "the body must be application/json",
            ));
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::malformed(format!("the body is not JSON: {e}")))?;
        if !value.is_object() {
            return Err(ApiError::malformed("the body must be a JSON object"));
        }
        serde_json::from_value(value).map(ApiJson).map_err(|e| {
            ApiError::malformed(format!("the body is not the JSON this route takes: {e}"))
        })
    }
}

/// A query string (unknown parameters refused by `T`'s `deny_unknown_fields`).
#[derive(Debug, Clone, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded_parse(query)
            .map(ApiQuery)
            .map_err(|e| ApiError::malformed(format!("bad query string: {e}")))
    }
}

/// A query string whose `var.NAME=VALUE` parameters (a variable filter,
/// `GET /v1/instances`) are taken apart, in order, as (NAME, VALUE); the rest
/// is `T`'s (unknown parameters refused by its `deny_unknown_fields`).
#[derive(Debug, Clone, Default)]
pub struct ApiQueryVars<T>(pub T, pub Vec<(String, String)>);

/// The prefix of a variable filter's parameter.
const VAR_PREFIX: &str = "var.";

impl<T, S> FromRequestParts<S> for ApiQueryVars<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let bad = |e: String| ApiError::malformed(format!("bad query string: {e}"));
        let mut rest = Vec::new();
        let mut vars = Vec::new();
        for segment in query.split('&').filter(|s| !s.is_empty()) {
            // Each parameter decoded alone, so that its key is read as sent.
            let pairs: Vec<(String, String)> = serde_urlencoded_parse(segment).map_err(bad)?;
            match pairs.into_iter().next() {
                Some((key, value)) if key.starts_with(VAR_PREFIX) => {
                    vars.push((key[VAR_PREFIX.len()..].to_string(), value));
                }
                _ => rest.push(segment),
            }
        }
        let parsed = serde_urlencoded_parse(&rest.join("&")).map_err(bad)?;
        Ok(ApiQueryVars(parsed, vars))
    }
}

fn serde_urlencoded_parse<T: DeserializeOwned>(query: &str) -> Result<T, String> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{query}").parse().map_err(|e| format!("{e}"))?,
    )
    .map(|q| q.0)
    .map_err(|e| e.body_text())
}

/// A path id (instance, deployment, process, tenant): 1 to 128 of
/// `A-Z a-z 0-9 . _ : -`, else 400.
pub fn check_id<'a>(what: &str, id: &'a str) -> Result<&'a str, ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(id)
    } else {
        Err(ApiError::malformed(format!(
            "invalid {what} id: use 1 to 128 of A-Z, a-z, 0-9, '.', '_', ':' and '-'"
        )))
    }
}

/// Unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::new(Code::ApiNotFound, "no such route; see /v1/openapi.json")
}

/// Known routes with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        Code::ApiMethodNotAllowed,
        "this route does not take that method; see /v1/openapi.json",
    )
}

/// A multipart body (a deployment bundle); a non-multipart body is 400.
pub struct ApiMultipart(pub axum::extract::Multipart);

impl<S: Send + Sync> FromRequest<S> for ApiMultipart {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Multipart::from_request(req, state)
            .await
            .map(ApiMultipart)
            .map_err(|e| {
                ApiError::malformed(format!(
                    "a bundle is multipart/form-data: {}",
                    e.body_text()
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_ids_are_checked() {
        for ok in [
            "0191a2b3c4d5e6f70011223344556677",
            "order-flow",
            "Process_1.v2",
            "a:b",
        ] {
            assert!(check_id("instance", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "../etc", "x/y", "é", &"x".repeat(129), "a%00"] {
            assert!(check_id("instance", bad).is_err(), "{bad}");
        }
    }
}
