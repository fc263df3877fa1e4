//! `GET /v1/whoami`: who the bearer key belongs to — the admin, or a
//! tenant by name — so a client (the console's sign-in) learns its role
//! without probing a route it may not call (which answers 403), and shows
//! the tenant's name rather than "a tenant key". Any valid key may ask; an
//! unknown or missing key is the usual 401.

use super::auth::{principal, Principal};
use super::error::ApiResult;
use super::types::ErrorBody;
use super::AppState;
use axum::extract::State;
use axum::http::request::Parts;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// `admin` or `tenant`.
    pub role: String,
    /// The tenant's name (a tenant key only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Who the caller's key belongs to.
#[utoipa::path(get, path = "/v1/whoami", tag = "auth",
    responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody)))]
pub async fn whoami(State(state): State<Arc<AppState>>, parts: Parts) -> ApiResult<Json<WhoAmI>> {
    Ok(Json(match principal(&parts, &state).await? {
        Principal::Admin => WhoAmI {
            role: "admin".into(),
            tenant: None,
        },
        Principal::Tenant(t) => WhoAmI {
            role: "tenant".into(),
            tenant: Some(t),
        },
    }))
}
