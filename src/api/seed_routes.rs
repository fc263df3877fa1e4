//! Seed 004's own routes for a run, served as aliases of the `/v1` ones:
//! `POST /api/flows/executions/{executionId}/cancel` is
//! `POST /v1/instances/{id}/cancel`, and
//! `POST /api/flows/executions/{executionId}/retry?mode=full|from-failure`
//! is `POST /v1/instances/{id}/retry`. Same handlers, so the same tenant-key
//! auth, bodies, answers and codes; an execution id is an instance id.

use super::auth::TenantCaller;
use super::error::ApiResult;
use super::extract::{ApiJson, ApiQuery};
use super::instances;
use super::types::{CancelBody, ErrorBody, RetryQuery};
use super::AppState;
use crate::runtime::InstanceView;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use std::sync::Arc;

/// The alias routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/flows/executions/{executionId}/cancel", post(cancel))
        .route("/api/flows/executions/{executionId}/retry", post(retry))
}

/// Seed 004's cancel of a run: the same as `POST /v1/instances/{id}/cancel`.
#[utoipa::path(post, path = "/api/flows/executions/{executionId}/cancel", tag = "instances", request_body = CancelBody,
    params(("executionId" = String, Path, description = "the instance id")),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    state: State<Arc<AppState>>,
    tenant: TenantCaller,
    id: Path<String>,
    body: ApiJson<CancelBody>,
) -> ApiResult<Json<InstanceView>> {
    instances::cancel(state, tenant, id, body).await
}

/// Seed 004's retry of a run: the same as `POST /v1/instances/{id}/retry`.
#[utoipa::path(post, path = "/api/flows/executions/{executionId}/retry", tag = "instances",
    params(("executionId" = String, Path, description = "the instance id"),
        ("mode" = Option<String>, Query, description = "full (default) or from-failure")),
    responses((status = 201, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn retry(
    state: State<Arc<AppState>>,
    tenant: TenantCaller,
    id: Path<String>,
    query: ApiQuery<RetryQuery>,
) -> ApiResult<(StatusCode, Json<InstanceView>)> {
    instances::retry(state, tenant, id, query).await
}
