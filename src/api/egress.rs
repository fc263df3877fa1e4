//! Egress grants (`PUT/GET/DELETE /v1/egress/{module}`, `GET /v1/egress`)
//! and secrets (`PUT/DELETE /v1/secrets/{name}`, `GET /v1/secrets`).
//!
//! Why grants live here and not in the deployment bundle: a grant is the
//! tenant's decision about a module's reach, and it must be revocable at
//! once (an incident, a leaked key) without redeploying code; the next
//! attempt meets the changed grant. A deploy still needs the grant to exist
//! first, so code that calls out never runs ungranted.
//!
//! Invariants: a tenant sees only its own grants and secrets; a secret's
//! value is never answered back (a PUT answers 204, the listing names and
//! times only).

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::codes::Code;
use crate::egress::Grant;
use crate::store::egress::{EgressStore, GrantRecord};
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

/// A module's grant.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantBody {
    pub module: String,
    #[serde(flatten)]
    pub grant: Grant,
    pub updated_at: DateTime<Utc>,
}

impl GrantBody {
    fn of(r: &GrantRecord) -> GrantBody {
        GrantBody {
            module: r.module.clone(),
            grant: serde_json::from_str(&r.grant_json).unwrap_or_default(),
            updated_at: from_millis(r.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GrantList {
    pub grants: Vec<GrantBody>,
}

/// Set a module's grant: what its attempts may call. Each rule's host must
/// lie within the operator's `sutra.egress.allowed-hosts`.
#[utoipa::path(put, path = "/v1/egress/{module}", tag = "egress", request_body = Grant,
    responses((status = 200, body = GrantBody), (status = 400, body = ErrorBody)))]
pub async fn put_grant(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(module): Path<String>,
    ApiJson(grant): ApiJson<Grant>,
) -> ApiResult<Json<GrantBody>> {
    check_id("module", &module)?;
    let r = state.runtime.put_grant(&tenant, &module, &grant).await?;
    Ok(Json(GrantBody::of(&r)))
}

/// A module's grant.
#[utoipa::path(get, path = "/v1/egress/{module}", tag = "egress",
    responses((status = 200, body = GrantBody), (status = 404, body = ErrorBody)))]
pub async fn get_grant(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(module): Path<String>,
) -> ApiResult<Json<GrantBody>> {
    check_id("module", &module)?;
    let r = state
        .runtime
        .store()
        .get_grant(&tenant, &module)
        .await?
        .ok_or_else(|| {
            ApiError::new(Code::ApiNotFound, format!("no egress grant for `{module}`"))
        })?;
    Ok(Json(GrantBody::of(&r)))
}

/// The caller's grants, by module.
#[utoipa::path(get, path = "/v1/egress", tag = "egress",
    responses((status = 200, body = GrantList)))]
pub async fn list_grants(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<GrantList>> {
    let grants = state.runtime.store().list_grants(&tenant).await?;
    Ok(Json(GrantList {
        grants: grants.iter().map(GrantBody::of).collect(),
    }))
}

/// Revoke a module's grant: its next attempt's requests are denied.
#[utoipa::path(delete, path = "/v1/egress/{module}", tag = "egress",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete_grant(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(module): Path<String>,
) -> ApiResult<StatusCode> {
    check_id("module", &module)?;
    if state.runtime.store().delete_grant(&tenant, &module).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            Code::ApiNotFound,
            format!("no egress grant for `{module}`"),
        ))
    }
}

/// `PUT /v1/secrets/{name}`.
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretPutBody {
    /// The value (1 to 8 KiB of text). Never answered back.
    pub value: String,
}

impl std::fmt::Debug for SecretPutBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretPutBody { value: [redacted] }")
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretBody {
    pub name: String,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretBody>,
}

/// Set a secret (sealed at rest; write-only: never answered back). A task
/// uses it as `{{secret:NAME}}` on requests to the hosts its grant binds.
#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "egress", request_body = SecretPutBody,
    responses((status = 204), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "SUTRA.CONFIG.INVALID: the server has no SUTRA_SECRET_KEY")))]
pub async fn put_secret(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<SecretPutBody>,
) -> ApiResult<StatusCode> {
    state
        .runtime
        .put_secret(&tenant, &name, &body.value)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's secrets: names and times, never values.
#[utoipa::path(get, path = "/v1/secrets", tag = "egress",
    responses((status = 200, body = SecretList)))]
pub async fn list_secrets(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<SecretList>> {
    let rows = state.runtime.store().list_secrets(&tenant).await?;
    Ok(Json(SecretList {
        secrets: rows
            .into_iter()
            .map(|(name, at)| SecretBody {
                name,
                updated_at: from_millis(at),
            })
            .collect(),
    }))
}

/// Delete a secret: requests using its placeholder are denied from then on.
#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "egress",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete_secret(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    check_id("secret", &name)?;
    if state.runtime.store().delete_secret(&tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            Code::ApiNotFound,
            format!("no secret `{name}`"),
        ))
    }
}
