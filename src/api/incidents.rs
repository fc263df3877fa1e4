//! Incidents: `GET /v1/incidents[?instance=&state=&after=&limit=]`,
//! `POST /v1/incidents/{id}/resolve`. A tenant sees only its own.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiQuery};
use super::types::ErrorBody;
use super::AppState;
use crate::store::channels::{IncidentFilter, IncidentRecord, INCIDENT_OPEN, INCIDENT_RESOLVED};
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentBody {
    pub id: String,
    /// `delivery_poisoned` or `external_task_failed`.
    pub kind: String,
    /// OPEN or RESOLVED.
    pub state: String,
    pub instance: String,
    /// The process of its instance (absent once the instance is gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// The request (push delivery or external task) it stopped.
    pub request: String,
    pub channel: String,
    pub task: String,
    /// The last error.
    pub message: String,
    pub created_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}

impl From<&IncidentRecord> for IncidentBody {
    fn from(i: &IncidentRecord) -> Self {
        IncidentBody {
            id: i.id.clone(),
            kind: i.kind.clone(),
            state: i.state.clone(),
            instance: i.instance_id.clone(),
            process: i.process_id.clone(),
            request: i.request_id.clone(),
            channel: i.channel.clone(),
            task: i.node.clone(),
            message: i.message.clone(),
            created_at: from_millis(i.created_at),
            resolved_at: i.resolved_at.map(from_millis),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct IncidentList {
    pub incidents: Vec<IncidentBody>,
    /// Pass as `after` for the next page; null on the last page.
    pub next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentQuery {
    pub instance: Option<String>,
    pub state: Option<String>,
    pub after: Option<String>,
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResolveAnswer {
    pub incident: IncidentBody,
    /// `rearmed` (the delivery or task is pending again) or `closed` (its call no longer waits).
    pub outcome: String,
}

/// The caller's incidents, oldest first.
#[utoipa::path(get, path = "/v1/incidents", tag = "incidents",
    params(("instance" = Option<String>, Query), ("state" = Option<String>, Query, description = "OPEN or RESOLVED"),
        ("after" = Option<String>, Query), ("limit" = Option<i64>, Query)),
    responses((status = 200, body = IncidentList), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiQuery(q): ApiQuery<IncidentQuery>,
) -> ApiResult<Json<IncidentList>> {
    if let Some(s) = &q.state {
        if s != INCIDENT_OPEN && s != INCIDENT_RESOLVED {
            return Err(ApiError::malformed(format!(
                "state `{s}` is neither OPEN nor RESOLVED"
            )));
        }
    }
    if let Some(i) = &q.instance {
        check_id("instance", i)?;
    }
    if let Some(a) = &q.after {
        check_id("incident", a)?;
    }
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::malformed(format!(
            "limit must be from 1 to {MAX_PAGE}"
        )));
    }
    let rows = state
        .runtime
        .incidents(&IncidentFilter {
            tenant: Some(tenant),
            instance_id: q.instance,
            state: q.state,
            after_id: q.after,
            limit: limit + 1,
        })
        .await?;
    let more = rows.len() as i64 > limit;
    let page: Vec<IncidentBody> = rows.iter().take(limit as usize).map(Into::into).collect();
    let next = if more {
        page.last().map(|i| i.id.clone())
    } else {
        None
    };
    Ok(Json(IncidentList {
        incidents: page,
        next,
    }))
}

/// Resolve an incident: re-arm its delivery (its count starts again) or
/// its external task (fresh worker retries) if the call still waits.
#[utoipa::path(post, path = "/v1/incidents/{id}/resolve", tag = "incidents",
    responses((status = 200, body = ResolveAnswer), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "SUTRA.RUNTIME.INCIDENT.RESOLVED")))]
pub async fn resolve(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<ResolveAnswer>> {
    check_id("incident", &id)?;
    let (incident, outcome) = state.runtime.resolve_incident(&tenant, &id).await?;
    Ok(Json(ResolveAnswer {
        incident: (&incident).into(),
        outcome: outcome.as_str().to_string(),
    }))
}
