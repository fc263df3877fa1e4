//! `POST /v1/instances/{id}/migrate`: move a WAITING or FAILED instance onto
//! another deployment of its process (runtime/migrate.rs).

use super::auth::TenantCaller;
use super::error::ApiResult;
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::runtime::{InstanceView, MigrateRequest};
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MigrateBody {
    /// The deployment to move to (of the same process).
    pub target_deployment: String,
    /// Source node id → target node id; unmapped nodes keep their id.
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
}

/// Migrate an instance: a FAILED one resumes at its failed node with a
/// fresh budget; a WAITING one keeps waiting on the new version.
#[utoipa::path(post, path = "/v1/instances/{id}/migrate", tag = "instances", request_body = MigrateBody,
    responses((status = 200, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "SUTRA.RUNTIME.MIGRATION.UNMAPPED_NODE, SUTRA.RUNTIME.MIGRATION.TARGET_INVALID")))]
pub async fn migrate(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MigrateBody>,
) -> ApiResult<Json<InstanceView>> {
    check_id("instance", &id)?;
    check_id("deployment", &body.target_deployment)?;
    state
        .runtime
        .migrate(
            &tenant,
            &id,
            &MigrateRequest {
                target: body.target_deployment,
                mapping: body.mapping,
            },
        )
        .await?;
    Ok(Json(state.runtime.inspect(&id).await?))
}
