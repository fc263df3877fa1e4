//! `POST /v1/instances/{id}/events/{name}`: resume an instance that waits on
//! a named event (a States-language `Wait` with `EventName`), with an
//! optional JSON object placed at the wait's `ResultPath`.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::runtime::InstanceView;
use crate::store::Store;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Resume the instance's wait on event `name`; answers the instance once every token waits again.
#[utoipa::path(post, path = "/v1/instances/{id}/events/{name}", tag = "instances",
    request_body(content = Object, description = "optional event data (a JSON object) placed at the wait's ResultPath"),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody),
        (status = 409, description = "SUTRA.RUNTIME.EVENT.NOT_AWAITED: the instance does not wait for this event", body = ErrorBody)))]
pub async fn resume(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path((id, name)): Path<(String, String)>,
    ApiJson(data): ApiJson<Map<String, Value>>,
) -> ApiResult<Json<InstanceView>> {
    check_id("instance", &id)?;
    if name.is_empty() || name.len() > 128 {
        return Err(ApiError::malformed("an event name has 1 to 128 characters"));
    }
    state
        .runtime
        .store()
        .load_instance(&id)
        .await?
        .filter(|r| r.tenant == tenant)
        .ok_or_else(|| ApiError::instance_not_found(&id))?;
    state.runtime.resume_event(&id, &name, data).await?;
    Ok(Json(state.runtime.inspect(&id).await?))
}
