//! Channels (`PUT/GET/DELETE /v1/channels/{name}`, `GET /v1/channels`) and
//! the counterpart's answers (`POST /v1/channels/{name}/responses`).
//!
//! Invariants: a tenant sees and answers only its own channels and calls
//! (another tenant's channel or correlation answers 404); a channel's
//! secret is shown when it is set (the answer to a PUT), never by a GET.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use super::types::ErrorBody;
use super::AppState;
use crate::codes::Code;
use crate::engine::TaskOutcome;
use crate::runtime::ChannelSpec;
use crate::store::channels::{ChannelRecord, ChannelStore, Transport};
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use utoipa::ToSchema;

/// `PUT /v1/channels/{name}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelPutBody {
    /// `push` (the outbox POSTs each request to `url`) or `pull` (workers fetch them).
    pub transport: String,
    /// The push URL (`http://`); a host `sutra.outbox.allowed-hosts` allows.
    pub url: Option<String>,
    /// The HMAC-SHA256 signing secret (16 to 256 characters). Omitted: kept, or a fresh one.
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelBody {
    pub name: String,
    pub transport: String,
    pub url: Option<String>,
    /// Only in the answer to a PUT: verify `Sutra-Signature` with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ChannelBody {
    fn of(c: &ChannelRecord, with_secret: bool) -> Self {
        ChannelBody {
            name: c.name.clone(),
            transport: c.transport.as_str().to_string(),
            url: c.url.clone(),
            secret: with_secret.then(|| c.secret.clone()),
            created_at: from_millis(c.created_at),
            updated_at: from_millis(c.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChannelList {
    pub channels: Vec<ChannelBody>,
}

/// `POST /v1/channels/{name}/responses`: the answer to a call.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResponseBody {
    /// The request's `correlation`.
    pub correlation: String,
    /// The answer's variables (the task's output).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
    /// A BPMN error code instead: routed to the task's error boundary.
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResponseAnswer {
    pub instance: String,
    /// The instance's state after the answer.
    pub state: String,
}

fn channel_name(name: &str) -> ApiResult<&str> {
    if crate::runtime::valid_channel_name(name) {
        Ok(name)
    } else {
        Err(ApiError::malformed(
            "invalid channel name: use 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-'",
        ))
    }
}

/// Create or replace a channel.
#[utoipa::path(put, path = "/v1/channels/{name}", tag = "channels", request_body = ChannelPutBody,
    responses((status = 201, body = ChannelBody), (status = 200, body = ChannelBody),
        (status = 422, body = ErrorBody, description = "SUTRA.RUNTIME.CHANNEL.INVALID, SUTRA.OUTBOUND.HOST_NOT_ALLOWED")))]
pub async fn put(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ChannelPutBody>,
) -> ApiResult<(StatusCode, Json<ChannelBody>)> {
    channel_name(&name)?;
    let transport = Transport::parse(&body.transport).ok_or_else(|| {
        ApiError::new(
            Code::ChannelInvalid,
            format!(
                "transport `{}` is neither `push` nor `pull`",
                body.transport
            ),
        )
    })?;
    let (record, created) = state
        .runtime
        .set_channel(
            &tenant,
            &name,
            ChannelSpec {
                transport,
                url: body.url,
                secret: body.secret,
            },
        )
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ChannelBody::of(&record, true))))
}

/// Show a channel (without its secret).
#[utoipa::path(get, path = "/v1/channels/{name}", tag = "channels",
    responses((status = 200, body = ChannelBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<ChannelBody>> {
    channel_name(&name)?;
    let c = state
        .runtime
        .store()
        .get_channel(&tenant, &name)
        .await?
        .ok_or_else(|| ApiError::new(Code::ChannelNotFound, format!("no channel {name}")))?;
    Ok(Json(ChannelBody::of(&c, false)))
}

/// The caller's channels.
#[utoipa::path(get, path = "/v1/channels", tag = "channels",
    responses((status = 200, body = ChannelList)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<ChannelList>> {
    let channels = state.runtime.store().list_channels(&tenant).await?;
    Ok(Json(ChannelList {
        channels: channels.iter().map(|c| ChannelBody::of(c, false)).collect(),
    }))
}

/// Delete a channel no live deployment calls.
#[utoipa::path(delete, path = "/v1/channels/{name}", tag = "channels",
    responses((status = 204), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "SUTRA.RUNTIME.CHANNEL.IN_USE")))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    channel_name(&name)?;
    state.runtime.delete_channel(&tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The counterpart's answer to a call: its variables complete the task, or
/// its BPMN error code routes to the task's error boundary. 409
/// `SUTRA.DISPATCH.CHANNEL_CALL.RETRY_PENDING` while the call re-issues its
/// request (try again once the new one has arrived).
#[utoipa::path(post, path = "/v1/channels/{name}/responses", tag = "channels", request_body = ResponseBody,
    responses((status = 200, body = ResponseAnswer), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "SUTRA.DISPATCH.CHANNEL_CALL.RETRY_PENDING")))]
pub async fn respond(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ResponseBody>,
) -> ApiResult<Json<ResponseAnswer>> {
    channel_name(&name)?;
    if body.correlation.is_empty() || body.correlation.len() > 512 {
        return Err(ApiError::malformed("`correlation`: 1 to 512 characters"));
    }
    let outcome = match body.error_code {
        Some(code) => {
            if code.is_empty() || code.len() > 256 {
                return Err(ApiError::malformed("`errorCode`: 1 to 256 characters"));
            }
            if !body.variables.is_empty() {
                return Err(ApiError::malformed(
                    "give `variables` or `errorCode`, not both",
                ));
            }
            TaskOutcome::BusinessError {
                message: body
                    .error_message
                    .unwrap_or_else(|| format!("channel {name} answered {code}")),
                code,
                details: None,
            }
        }
        None => TaskOutcome::Completed {
            output: Value::Object(body.variables),
        },
    };
    let snap = state
        .runtime
        .answer(&tenant, &name, &body.correlation, outcome)
        .await?;
    Ok(Json(ResponseAnswer {
        instance: snap.instance_id.clone(),
        state: snap.state.as_str().to_string(),
    }))
}
