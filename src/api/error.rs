//! The API's one error shape: `{"code", "message", "details"}` with a
//! stable [`Code`] and the HTTP status that code implies.
//!
//! Invariant: an answer never carries internals. A store or server failure
//! is logged in full and answered with a generic message; every other
//! message is the runtime's own user-facing text.

use crate::codes::{Code, ErrorClass};
use crate::runtime::RuntimeError;
use crate::store::StoreError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Code,
    pub message: String,
    pub details: Value,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The status a code answers with.
pub fn status_of(code: Code) -> StatusCode {
    use Code::*;
    match code {
        ApiMalformed => StatusCode::BAD_REQUEST,
        ApiUnauthorized => StatusCode::UNAUTHORIZED,
        ApiForbidden => StatusCode::FORBIDDEN,
        ApiNotFound | InstanceNotFound | ProcessNotFound | DeploymentNotFound
        | MessageNotCorrelated | TenantNotFound | ChannelCallNotFound | ChannelNotFound
        | ExternalTaskNotFound | IncidentNotFound | TenantKeyNotFound | BatchNotFound => {
            StatusCode::NOT_FOUND
        }
        ApiMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ApiPayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ApiUnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ApiUriTooLong => StatusCode::URI_TOO_LONG,
        ApiHeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ApiTooManyConnections => StatusCode::SERVICE_UNAVAILABLE,
        // As payment APIs answer a key reused with another payload.
        IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
        InstanceState
        | TenantExists
        | EventNotAwaited
        | ChannelCallRetryPending
        | ChannelInUse
        | ExternalTaskLockLost
        | IncidentResolved
        | BatchEnded => StatusCode::CONFLICT,
        QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        StoreFailed => StatusCode::SERVICE_UNAVAILABLE,
        ApiInternal | SnapshotVersion => StatusCode::INTERNAL_SERVER_ERROR,
        c if c.class() == ErrorClass::InvalidInput => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            status: status_of(code),
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn malformed(message: impl Into<String>) -> Self {
        ApiError::new(Code::ApiMalformed, message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            Code::ApiUnauthorized,
            "a valid bearer key is required (Authorization: Bearer <key>)",
        )
    }

    pub fn internal(what: impl std::fmt::Display) -> Self {
        tracing::error!(error = %what, "internal error answering a request");
        ApiError::new(
            Code::ApiInternal,
            "the server failed to answer; see its log",
        )
    }

    pub fn instance_not_found(id: &str) -> Self {
        ApiError::new(Code::InstanceNotFound, format!("no instance {id}"))
    }

    pub fn deployment_not_found(id: &str) -> Self {
        ApiError::new(Code::DeploymentNotFound, format!("no deployment {id}"))
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let status = status_of(e.code);
        if status.is_server_error() {
            tracing::error!(code = %e.code, error = %e.message, "runtime failure answering a request");
            let message = if e.code == Code::StoreFailed {
                "the store is unavailable; retry later"
            } else {
                "the server failed to answer; see its log"
            };
            return ApiError::new(e.code, message);
        }
        let details = if e.diagnostics.is_empty() {
            Value::Null
        } else {
            json!({ "diagnostics": e.diagnostics })
        };
        ApiError {
            status,
            code: e.code,
            message: e.message,
            details,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::from(RuntimeError::from(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            json!({ "code": self.code.as_str(), "message": self.message, "details": self.details });
        (self.status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_their_statuses() {
        assert_eq!(status_of(Code::ApiMalformed), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(Code::InstanceNotFound), StatusCode::NOT_FOUND);
        assert_eq!(
            status_of(Code::QuotaExceeded),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status_of(Code::BpmnDeadEnd),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            status_of(Code::TaskModuleInvalid),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(status_of(Code::InstanceState), StatusCode::CONFLICT);
        assert_eq!(
            status_of(Code::IdempotencyKeyReused),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(status_of(Code::ApiUriTooLong), StatusCode::URI_TOO_LONG);
        assert_eq!(
            status_of(Code::ApiHeadersTooLarge),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        assert_eq!(status_of(Code::TenantKeyNotFound), StatusCode::NOT_FOUND);
        assert_eq!(
            status_of(Code::StoreFailed),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn server_failures_never_carry_their_message() {
        let e = ApiError::from(RuntimeError::new(
            Code::StoreFailed,
            "database error: disk I/O at /var/secret.db",
        ));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!e.message.contains("secret"), "{}", e.message);
        let e = ApiError::from(RuntimeError::new(
            Code::SnapshotVersion,
            "snapshot format 9 at row 12",
        ));
        assert!(!e.message.contains("row 12"), "{}", e.message);
    }
}
