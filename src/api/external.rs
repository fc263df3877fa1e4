//! External tasks (the pull transport): `POST /v1/external-tasks/fetch-and-lock`
//! and `/v1/external-tasks/{id}/{complete,failure,bpmn-error,extend-lock,unlock}`.
//! Thin: the rules are in `runtime/external.rs`.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::ErrorBody;
use super::AppState;
use crate::runtime::{ExternalFailure, FetchRequest};
use crate::store::channels::RequestRecord;
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;

/// `POST /v1/external-tasks/fetch-and-lock`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FetchBody {
    pub worker_id: String,
    /// The pull channels to fetch from.
    pub channels: Vec<String>,
    /// 1 to 1000 (default 1).
    pub max_tasks: Option<i64>,
    /// How long the fetched tasks stay locked, in ms.
    pub lock_duration: u64,
    /// Long polling: how long to wait for work when none is there, in ms (default 0, at most 300000).
    #[serde(default)]
    pub async_response_timeout: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalTaskBody {
    /// The task id (the request id, also its idempotency key).
    pub id: String,
    pub channel: String,
    pub worker_id: Option<String>,
    pub lock_expiration_time: Option<DateTime<Utc>>,
    pub instance: String,
    /// The task node id.
    pub task: String,
    /// The call's attempt (a re-issued request is a new task).
    pub attempt: i64,
    pub correlation: String,
    /// Retries left before an incident (`sutra.external-task.retries` at first).
    pub retries: Option<i64>,
    pub error_message: Option<String>,
    #[schema(value_type = Object)]
    pub variables: Value,
}

impl From<&RequestRecord> for ExternalTaskBody {
    fn from(r: &RequestRecord) -> Self {
        ExternalTaskBody {
            id: r.id.clone(),
            channel: r.channel.clone(),
            worker_id: r.claimed_by.clone(),
            lock_expiration_time: r.claimed_until.map(from_millis),
            instance: r.instance_id.clone(),
            task: r.node.clone(),
            attempt: r.call_attempt,
            correlation: r.correlation.clone(),
            retries: r.retries,
            error_message: r.last_error.clone(),
            variables: serde_json::from_str(&r.payload).unwrap_or(Value::Null),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExternalTaskList {
    pub tasks: Vec<ExternalTaskBody>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CompleteBody {
    pub worker_id: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FailureBody {
    pub worker_id: String,
    pub error_message: String,
    /// Retries left as the worker counts them (default: one fewer than now).
    pub retries: Option<i64>,
    /// When the task is fetchable again, in ms (default 0).
    #[serde(default)]
    pub retry_timeout: u64,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BpmnErrorBody {
    pub worker_id: String,
    pub error_code: String,
    pub error_message: Option<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtendLockBody {
    pub worker_id: String,
    /// The new lock, from now, in ms.
    pub new_duration: u64,
}

fn task_id(id: &str) -> ApiResult<&str> {
    check_id("external task", id)
}

/// Lock up to `maxTasks` fetchable tasks of the caller's pull channels,
/// waiting up to `asyncResponseTimeout` for one (woken at once when work arrives).
#[utoipa::path(post, path = "/v1/external-tasks/fetch-and-lock", tag = "external tasks", request_body = FetchBody,
    responses((status = 200, body = ExternalTaskList), (status = 422, body = ErrorBody)))]
pub async fn fetch_and_lock(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiJson(body): ApiJson<FetchBody>,
) -> ApiResult<Json<ExternalTaskList>> {
    let req = FetchRequest {
        worker_id: body.worker_id,
        channels: body.channels,
        max_tasks: body.max_tasks.unwrap_or(1),
        lock: Duration::from_millis(body.lock_duration),
        wait: Duration::from_millis(body.async_response_timeout),
    };
    let tasks = state.runtime.fetch_and_lock(&tenant, &req).await?;
    Ok(Json(ExternalTaskList {
        tasks: tasks.iter().map(Into::into).collect(),
    }))
}

/// Complete a locked task: its variables are the call's answer.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/complete", tag = "external tasks", request_body = CompleteBody,
    responses((status = 204), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "SUTRA.RUNTIME.EXTERNAL_TASK.LOCK_LOST, SUTRA.DISPATCH.CHANNEL_CALL.RETRY_PENDING")))]
pub async fn complete(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CompleteBody>,
) -> ApiResult<StatusCode> {
    task_id(&id)?;
    state
        .runtime
        .complete_external(&tenant, &id, &body.worker_id, body.variables)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A worker-side failure: spends one of the task's retries (never the
/// call's `q:retry`); none left opens an incident.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/failure", tag = "external tasks", request_body = FailureBody,
    responses((status = 200, body = ExternalTaskBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn failure(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FailureBody>,
) -> ApiResult<Json<ExternalTaskBody>> {
    task_id(&id)?;
    if body.retries.is_some_and(|r| r < 0) {
        return Err(ApiError::malformed("`retries` must not be negative"));
    }
    let task = state
        .runtime
        .fail_external(
            &tenant,
            &id,
            &body.worker_id,
            &ExternalFailure {
                message: body.error_message,
                retries: body.retries,
                retry_timeout: Duration::from_millis(body.retry_timeout),
            },
        )
        .await?;
    Ok(Json((&task).into()))
}

/// A BPMN error: routed to the task's error boundary.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/bpmn-error", tag = "external tasks", request_body = BpmnErrorBody,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn bpmn_error(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<BpmnErrorBody>,
) -> ApiResult<StatusCode> {
    task_id(&id)?;
    state
        .runtime
        .bpmn_error_external(
            &tenant,
            &id,
            &body.worker_id,
            &body.error_code,
            body.error_message,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Keep a locked task longer.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/extend-lock", tag = "external tasks", request_body = ExtendLockBody,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn extend_lock(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExtendLockBody>,
) -> ApiResult<StatusCode> {
    task_id(&id)?;
    state
        .runtime
        .extend_lock(
            &tenant,
            &id,
            &body.worker_id,
            Duration::from_millis(body.new_duration),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Give a task back: fetchable again at once.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/unlock", tag = "external tasks",
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn unlock(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    task_id(&id)?;
    state.runtime.unlock_external(&tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
