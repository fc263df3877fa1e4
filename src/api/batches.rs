//! Batch operations (issue 35 item 4): `POST /v1/batches` retries,
//! cancels, resolves the incidents of, or migrates every instance a filter
//! (the listing's: state, process, start time, business key, variables) or
//! a list of ids selects, as one durable operation the server carries out
//! at a bounded rate (`runtime::batches`); progress and each item's outcome
//! are read back, and a running batch can be cancelled.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson, ApiQuery};
use super::instances::{check_business_key, check_failure_filters, started_within};
use super::types::ErrorBody;
use super::AppState;
use crate::codes::Code;
use crate::runtime::batches::{BatchParams, MAX_BATCH_ITEMS};
use crate::store::batches::{BatchItem, BatchRecord, BatchStore};
use crate::store::{InstanceFilter, SearchVar, Store};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// Which instances a batch selects: the listing's filters (all optional,
/// all must hold).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchFilter {
    pub state: Option<String>,
    pub process: Option<String>,
    /// RFC 3339: started at or after.
    pub since: Option<String>,
    /// RFC 3339: started at or before.
    pub until: Option<String>,
    pub business_key: Option<String>,
    /// The error code the instance failed with (as `errorCode=`).
    pub error_code: Option<String>,
    /// The node whose failure ended it (as `failedNode=`).
    pub failed_node: Option<String>,
    /// Top-level variables and the scalar each must be (as `var.NAME=`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
}

/// `POST /v1/batches`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchBody {
    /// `retry`, `cancel`, `resolve` (the open incidents of each instance) or `migrate`.
    pub action: String,
    /// The instances, by id; or give `filter`.
    pub instances: Option<Vec<String>>,
    pub filter: Option<BatchFilter>,
    /// `retry`: `full` (default) or `from-failure`.
    pub mode: Option<String>,
    /// `cancel`: the reason kept with each cancellation.
    pub reason: Option<String>,
    /// `migrate`: the target deployment.
    pub deployment: Option<String>,
    /// `migrate`: source node → target node.
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
}

/// A batch and its progress.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    pub id: String,
    pub action: String,
    /// RUNNING, COMPLETED or CANCELLED.
    pub state: String,
    #[schema(value_type = Object)]
    pub params: Value,
    pub total: i64,
    /// Items by outcome: PENDING, SUCCEEDED, FAILED, SKIPPED.
    pub counts: BTreeMap<String, i64>,
    pub created_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchList {
    pub batches: Vec<BatchView>,
}

/// One selected instance and what the batch did to it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchItemBody {
    pub seq: i64,
    pub instance: String,
    /// PENDING, SUCCEEDED, FAILED or SKIPPED.
    pub state: String,
    pub code: Option<String>,
    pub message: Option<String>,
    /// What it made (a retry's new instance; how many incidents it resolved).
    pub result: Option<String>,
    pub ended_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchItemList {
    pub items: Vec<BatchItemBody>,
    /// Pass as `after` for the next page; null on the last page.
    pub next: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemsQuery {
    pub after: Option<i64>,
    pub limit: Option<i64>,
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

async fn view(state: &AppState, b: BatchRecord) -> ApiResult<BatchView> {
    let counts = state.runtime.store().batch_counts(&b.id).await?;
    Ok(BatchView {
        params: serde_json::from_str(&b.params).unwrap_or(Value::Null),
        counts: counts.into_iter().collect(),
        id: b.id,
        action: b.action,
        state: b.state,
        total: b.total,
        created_at: at(b.created_at),
        ended_at: b.ended_at.map(at),
    })
}

/// The ids a filter selects, oldest first; more than a batch takes is a 422.
async fn select(state: &AppState, tenant: &str, f: BatchFilter) -> ApiResult<Vec<String>> {
    if let Some(s) = &f.state {
        if crate::engine::InstanceState::parse(s).is_none() {
            return Err(ApiError::malformed(format!(
                "filter.state `{s}` is no instance state"
            )));
        }
    }
    if let Some(p) = &f.process {
        check_id("process", p)?;
    }
    if let Some(k) = &f.business_key {
        check_business_key(k)?;
    }
    check_failure_filters(
        "filter.errorCode",
        f.error_code.as_deref(),
        "filter.failedNode",
        f.failed_node.as_deref(),
    )?;
    let vars = f
        .variables
        .iter()
        .map(|(name, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                _ => {
                    return Err(ApiError::malformed(format!(
                        "filter.variables.{name}: only a string, number or boolean is searchable"
                    )))
                }
            };
            Ok(SearchVar {
                name: name.clone(),
                value,
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let within = started_within(f.since.as_deref(), f.until.as_deref())?;
    let rows = state
        .runtime
        .store()
        .list_instances(&InstanceFilter {
            tenant: Some(tenant.to_string()),
            state: f.state,
            process_id: f.process,
            deployment_id: None,
            after_id: within.from.clone(),
            before_id: within.before.clone(),
            newest_first: false,
            business_key: f.business_key,
            vars,
            error_code: f.error_code,
            failed_node: f.failed_node,
            limit: MAX_BATCH_ITEMS as i64 + 1,
        })
        .await?;
    if rows.len() > MAX_BATCH_ITEMS {
        return Err(ApiError::new(
            Code::BatchTooLarge,
            format!("the filter selects more than {MAX_BATCH_ITEMS} instances, the most one batch takes: narrow it"),
        ));
    }
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Create a batch operation over a filter or a list of instances.
#[utoipa::path(post, path = "/v1/batches", tag = "batches", request_body = BatchBody,
    responses((status = 201, body = BatchView), (status = 400, body = ErrorBody),
        (status = 422, description = "SUTRA.RUNTIME.BATCH.TOO_LARGE: more than 10,000 instances selected", body = ErrorBody)))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiJson(body): ApiJson<BatchBody>,
) -> ApiResult<(StatusCode, Json<BatchView>)> {
    let instances = match (body.instances, body.filter) {
        (Some(ids), None) => {
            for id in &ids {
                check_id("instance", id)?;
            }
            ids
        }
        (None, Some(filter)) => select(&state, &tenant, filter).await?,
        _ => {
            return Err(ApiError::malformed(
                "give either `instances` (ids) or `filter`, not both",
            ))
        }
    };
    let params = BatchParams {
        mode: body.mode,
        reason: body.reason,
        deployment: body.deployment,
        mapping: body.mapping,
    };
    let batch = state
        .runtime
        .create_batch(&tenant, &body.action, params, instances)
        .await?;
    Ok((StatusCode::CREATED, Json(view(&state, batch).await?)))
}

/// The caller's batches, newest first (the last 100).
#[utoipa::path(get, path = "/v1/batches", tag = "batches", responses((status = 200, body = BatchList)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<BatchList>> {
    let rows = state.runtime.store().list_batches(&tenant, 100).await?;
    let mut batches = Vec::with_capacity(rows.len());
    for b in rows {
        batches.push(view(&state, b).await?);
    }
    Ok(Json(BatchList { batches }))
}

/// A batch and its progress.
#[utoipa::path(get, path = "/v1/batches/{id}", tag = "batches",
    responses((status = 200, body = BatchView), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<BatchView>> {
    check_id("batch", &id)?;
    let b = state.runtime.batch(&tenant, &id).await?;
    Ok(Json(view(&state, b).await?))
}

/// A batch's items in order, each with its outcome; page with `after`.
#[utoipa::path(get, path = "/v1/batches/{id}/items", tag = "batches",
    params(("after" = Option<i64>, Query), ("limit" = Option<i64>, Query, description = "1 to 1000, default 100")),
    responses((status = 200, body = BatchItemList), (status = 404, body = ErrorBody)))]
pub async fn items(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ItemsQuery>,
) -> ApiResult<Json<BatchItemList>> {
    check_id("batch", &id)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::malformed("limit must be from 1 to 1000"));
    }
    let b = state.runtime.batch(&tenant, &id).await?;
    let rows: Vec<BatchItem> = state
        .runtime
        .store()
        .batch_items(&b.id, q.after.unwrap_or(0), limit + 1)
        .await?;
    let more = rows.len() as i64 > limit;
    let items: Vec<BatchItemBody> = rows
        .into_iter()
        .take(limit as usize)
        .map(|i| BatchItemBody {
            seq: i.seq,
            instance: i.instance_id,
            state: i.state,
            code: i.code,
            message: i.message,
            result: i.result,
            ended_at: i.ended_at.map(at),
        })
        .collect();
    let next = if more {
        items.last().map(|i| i.seq)
    } else {
        None
    };
    Ok(Json(BatchItemList { items, next }))
}

/// Cancel a running batch: its pending items are skipped (those carried out stay done).
#[utoipa::path(post, path = "/v1/batches/{id}/cancel", tag = "batches",
    responses((status = 200, body = BatchView), (status = 404, body = ErrorBody),
        (status = 409, description = "SUTRA.RUNTIME.BATCH.ENDED", body = ErrorBody)))]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<BatchView>> {
    check_id("batch", &id)?;
    let b = state.runtime.cancel_batch(&tenant, &id).await?;
    Ok(Json(view(&state, b).await?))
}
