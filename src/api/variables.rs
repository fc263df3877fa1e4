//! `POST /v1/instances/{id}/variables`: an operator fixes the data of a
//! FAILED instance before a retry from its failure, or of a WAITING one
//! (issue 35 item 6). One step, journaled with who asked
//! (`Runtime::edit_variables`, `engine::edit`); the answer is the instance
//! view.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::runtime::InstanceView;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use utoipa::ToSchema;

/// The most variable names one edit sets or unsets.
const MAX_NAMES: usize = 1000;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditVariablesBody {
    /// Variables to set (created or replaced), by name.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub set: Map<String, Value>,
    /// Variables to remove.
    #[serde(default)]
    pub unset: Vec<String>,
    /// Who edits (kept in the journal; at most 1,024 bytes).
    pub by: Option<String>,
}

/// Set and unset variables of a FAILED or WAITING instance.
#[utoipa::path(post, path = "/v1/instances/{id}/variables", tag = "instances", request_body = EditVariablesBody,
    params(("id" = String, Path, description = "the instance")),
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "SUTRA.RUNTIME.INSTANCE_STATE: neither FAILED nor WAITING", body = ErrorBody)))]
pub async fn edit(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<EditVariablesBody>,
) -> ApiResult<Json<InstanceView>> {
    check_id("instance", &id)?;
    if body.set.is_empty() && body.unset.is_empty() {
        return Err(ApiError::malformed(
            "nothing to edit: give `set` (name → value) or `unset` (names)",
        ));
    }
    if body.set.len() + body.unset.len() > MAX_NAMES {
        return Err(ApiError::malformed(format!(
            "one edit sets or unsets at most {MAX_NAMES} variables"
        )));
    }
    state
        .runtime
        .edit_variables(&tenant, &id, body.set, body.unset, body.by)
        .await?;
    Ok(Json(state.runtime.inspect(&id).await?))
}
