//! `POST /v1/signals` `{"name", "variables"}`: broadcast a signal within
//! the caller's tenant (runtime/signals.rs). It reaches every signal wait
//! (intermediate catch, boundary, event-based gateway branch) of the
//! tenant armed when it is thrown, and starts one instance of every ACTIVE
//! process of the tenant with a signal start event of that name. Never
//! another tenant's. Answers once delivered; nobody listening is no error.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use super::types::ErrorBody;
use super::AppState;
use crate::runtime::signals::SignalAnswer;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use utoipa::ToSchema;

/// `POST /v1/signals`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    pub name: String,
    /// Merged into the variables of every instance it reaches or starts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
}

/// Broadcast a signal within the caller's tenant.
#[utoipa::path(post, path = "/v1/signals", tag = "instances", request_body = SignalBody,
    responses((status = 200, body = SignalAnswer), (status = 400, body = ErrorBody)))]
pub async fn signal(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiJson(body): ApiJson<SignalBody>,
) -> ApiResult<Json<SignalAnswer>> {
    if body.name.trim().is_empty() || body.name.len() > 256 {
        return Err(ApiError::malformed(
            "a signal needs a `name` of 1 to 256 characters",
        ));
    }
    let answer = state
        .runtime
        .signal(&tenant, &body.name, body.variables)
        .await?;
    Ok(Json(answer))
}
