//! Connections of HTTP tasks (issue 31): `PUT/GET/DELETE
//! /v1/connections/{name}`, `GET /v1/connections`. (Not `conns.rs`, the
//! server's TCP connection caps.)
//!
//! Invariants: a tenant sees only its own connections; a connection's
//! credential is write-only — a PUT answers the spec without it, a GET and
//! the listing never hold it (`runtime::connections`).

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::codes::Code;
use crate::runtime::connections::{ConnectionInput, ConnectionSpec};
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// A connection as answered: never its credential.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionBody {
    pub name: String,
    #[serde(flatten)]
    pub spec: ConnectionSpec,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionList {
    pub connections: Vec<ConnectionBody>,
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(Code::ApiNotFound, format!("no connection `{name}`"))
}

/// Create or replace a connection. The credential (an API key, a password,
/// a bearer token, an OAuth client secret) is sealed and never answered back.
#[utoipa::path(put, path = "/v1/connections/{name}", tag = "egress", request_body = ConnectionInput,
    responses((status = 200, body = ConnectionBody), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "SUTRA.CONFIG.INVALID: the server has no SUTRA_SECRET_KEY")))]
pub async fn put_connection(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ConnectionInput>,
) -> ApiResult<Json<ConnectionBody>> {
    let spec = state.runtime.put_connection(&tenant, &name, body).await?;
    Ok(Json(ConnectionBody {
        name,
        spec,
        updated_at: from_millis(state.runtime.clock().now().timestamp_millis()),
    }))
}

/// A connection, without its credential.
#[utoipa::path(get, path = "/v1/connections/{name}", tag = "egress",
    responses((status = 200, body = ConnectionBody), (status = 404, body = ErrorBody)))]
pub async fn get_connection(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<ConnectionBody>> {
    check_id("connection", &name)?;
    let (spec, at) = state
        .runtime
        .connection(&tenant, &name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(ConnectionBody {
        name,
        spec,
        updated_at: from_millis(at),
    }))
}

/// The caller's connections, by name.
#[utoipa::path(get, path = "/v1/connections", tag = "egress",
    responses((status = 200, body = ConnectionList)))]
pub async fn list_connections(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<ConnectionList>> {
    let rows = state.runtime.connections(&tenant).await?;
    Ok(Json(ConnectionList {
        connections: rows
            .into_iter()
            .map(|(name, spec, at)| ConnectionBody {
                name,
                spec,
                updated_at: from_millis(at),
            })
            .collect(),
    }))
}

/// Delete a connection and its credential: tasks naming it fail with
/// `Credential.NotFound` from their next attempt.
#[utoipa::path(delete, path = "/v1/connections/{name}", tag = "egress",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete_connection(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    check_id("connection", &name)?;
    if state.runtime.delete_connection(&tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&name))
    }
}
