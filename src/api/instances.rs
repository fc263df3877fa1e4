//! Instances: start (with `Idempotency-Key`), list (keyset paged), inspect,
//! history, cancel, retry (`full` / `from-failure`), and messages.
//!
//! Invariant: a tenant only ever sees its own instances — another tenant's
//! id answers exactly what a missing id answers (404 `INSTANCE_NOT_FOUND`).

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson, ApiQuery, ApiQueryVars};
use super::types::{
    CancelBody, CloseBody, ErrorBody, InstanceList, InstanceSummary, ListQuery, MessageAnswer,
    MessageBody, RetryQuery, StartBody, StartQuery,
};
use super::AppState;
use crate::codes::Code;
use crate::engine::InstanceState;
use crate::runtime::{HistoryView, InstanceView, RetryMode, StartRequest};
use crate::store::tenancy::TenancyStore;
use crate::store::{InstanceFilter, InstanceRecord, KeyHolder, Store};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use std::sync::Arc;

/// The header that makes a retried start return the same instance.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// RFC 7240: `Prefer: respond-async` answers a start once it is committed.
const PREFER: &str = "prefer";
const PREFERENCE_APPLIED: &str = "preference-applied";
/// Page size bounds of `GET /v1/instances`.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

/// The caller's instance `id`, or 404 (another tenant's too).
pub(crate) async fn own_instance(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> ApiResult<InstanceRecord> {
    check_id("instance", id)?;
    state
        .runtime
        .store()
        .load_instance(id)
        .await?
        .filter(|r| r.tenant == tenant)
        .ok_or_else(|| ApiError::instance_not_found(id))
}

async fn view(state: &AppState, id: &str) -> ApiResult<Json<InstanceView>> {
    Ok(Json(state.runtime.inspect(id).await?))
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = v
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= 200)
        .ok_or_else(|| {
            ApiError::malformed("Idempotency-Key must be 1 to 200 visible ASCII characters")
        })?;
    Ok(Some(key.to_string()))
}

/// Whether the client asked for the answer at commit: `?wait=false`, or
/// `Prefer: respond-async` (RFC 7240; other preferences are ignored).
fn answer_at_commit(query: &StartQuery, headers: &HeaderMap) -> bool {
    query.wait == Some(false) || prefers_async(headers)
}

/// `Prefer: respond-async` among the request's preferences.
fn prefers_async(headers: &HeaderMap) -> bool {
    headers.get_all(PREFER).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|p| {
                p.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("respond-async")
            })
        })
    })
}

/// Start an instance of the process's ACTIVE deployment; answers once every
/// token waits, or once the start is committed when asked (`?wait=false` or
/// `Prefer: respond-async`). An instance deleted at its end before the
/// answer (retention `PT0S`) answers its final state, with a `note`.
#[utoipa::path(post, path = "/v1/processes/{process}/instances", tag = "instances",
    request_body = StartBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "a retried start with the same key and the same request returns the same instance; the same key with another request is 422 SUTRA.RUNTIME.IDEMPOTENCY_KEY_REUSED. The key outlives an instance deleted at its end (retention PT0S) for sutra.instance.idempotency-window"),
        ("wait" = Option<bool>, Query, description = "false: answer once the start is committed (its first step durable; its first task may still run), not once every token waits"),
        ("Prefer" = Option<String>, Header, description = "respond-async: as wait=false (answered with Preference-Applied: respond-async)")),
    responses((status = 201, description = "started", body = Object), (status = 200, description = "the instance this key started before", body = Object),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn start(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(process): Path<String>,
    ApiQuery(query): ApiQuery<StartQuery>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<StartBody>,
) -> ApiResult<(StatusCode, HeaderMap, Json<InstanceView>)> {
    check_id("process", &process)?;
    if let Some(k) = &body.business_key {
        check_business_key(k)?;
    }
    let at_commit = answer_at_commit(&query, &headers);
    let mut answer_headers = HeaderMap::new();
    if prefers_async(&headers) {
        answer_headers.insert(
            PREFERENCE_APPLIED,
            axum::http::HeaderValue::from_static("respond-async"),
        );
    }
    let key = idempotency_key(&headers)?;
    if let Some(k) = &key {
        // The same request replays (200); another one is refused (422).
        let fingerprint = crate::runtime::idempotency::fingerprint(&process, None, &body.variables);
        let holder = state
            .runtime
            .replayed_holder(&tenant, k, &fingerprint)
            .await?;
        if let Some(holder) = holder {
            let view = replay(&state, &tenant, k, holder).await?;
            return Ok((StatusCode::OK, answer_headers, view));
        }
    }
    let id = crate::runtime::new_id(state.runtime.clock().now().timestamp_millis());
    let answered = state
        .runtime
        .start_answered(
            StartRequest {
                id: Some(id.clone()),
                tenant: tenant.clone(),
                process_id: process,
                variables: body.variables,
                idempotency_key: key.clone(),
                business_key: body.business_key,
                ..StartRequest::default()
            },
            at_commit,
        )
        .await?;
    if answered.id != id {
        // A concurrent start with the same key won: its answer.
        let holder = match &key {
            Some(k) => {
                let now = state.runtime.clock().now().timestamp_millis();
                state
                    .runtime
                    .store()
                    .instance_by_key(&tenant, k, now)
                    .await?
            }
            None => None,
        };
        let view = match (holder, &key) {
            (Some(h), Some(k)) => replay(&state, &tenant, k, h).await?,
            _ => view(&state, &answered.id).await?,
        };
        return Ok((StatusCode::OK, answer_headers, view));
    }
    let view = match answered.deleted {
        Some(ended) => Json(ended),
        None => view(&state, &id).await?,
    };
    Ok((StatusCode::CREATED, answer_headers, view))
}

/// What a replayed key answers: its live instance, or what the instance
/// deleted at its end left for its key (also when it was deleted between
/// the key's read and the inspection).
async fn replay(
    state: &AppState,
    tenant: &str,
    key: &str,
    holder: KeyHolder,
) -> ApiResult<Json<InstanceView>> {
    if let Some(ended) = &holder.ended {
        return Ok(Json(crate::runtime::answer::kept_key_view(
            &holder.id, ended,
        )));
    }
    match state.runtime.inspect(&holder.id).await {
        Ok(v) => Ok(Json(v)),
        Err(e) if e.code == Code::InstanceNotFound => {
            let now = state.runtime.clock().now().timestamp_millis();
            match state
                .runtime
                .store()
                .instance_by_key(tenant, key, now)
                .await?
            {
                Some(KeyHolder {
                    id,
                    ended: Some(ended),
                    ..
                }) => Ok(Json(crate::runtime::answer::kept_key_view(&id, &ended))),
                _ => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// List the caller's instances, oldest first; page with `after`.
#[utoipa::path(get, path = "/v1/instances", tag = "instances",
    params(("state" = Option<String>, Query), ("process" = Option<String>, Query), ("after" = Option<String>, Query),
        ("since" = Option<String>, Query, description = "only instances started at or after this RFC 3339 instant"),
        ("until" = Option<String>, Query, description = "only instances started at or before this RFC 3339 instant (ms precision)"), ("limit" = Option<i64>, Query),
        ("order" = Option<String>, Query, description = "`oldest` (default) or `newest` first; `after` continues in that order"),
        ("businessKey" = Option<String>, Query, description = "only instances started with this business key"),
        ("errorCode" = Option<String>, Query, description = "only instances whose error has this code (the list's `errorCode`); an index lookup"),
        ("failedNode" = Option<String>, Query, description = "only instances whose failed node (the list's `failedNode`: the first node, by id, in state FAILED) is this node id; an index lookup"),
        ("var.NAME" = Option<String>, Query, description = "only instances whose top-level variable NAME is this scalar (a string as itself, a number or boolean as its JSON: `var.orderId=A-17`, `var.total=12.5`, `var.vip=true`); several must all hold; an index lookup (values up to 256 bytes, the first 32 variables by name)")),
    responses((status = 200, body = InstanceList), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiQueryVars(q, vars): ApiQueryVars<ListQuery>,
) -> ApiResult<Json<InstanceList>> {
    let vars = search_filters(vars)?;
    if let Some(k) = &q.business_key {
        check_business_key(k)?;
    }
    check_failure_filters(
        "errorCode",
        q.error_code.as_deref(),
        "failedNode",
        q.failed_node.as_deref(),
    )?;
    if let Some(s) = &q.state {
        if InstanceState::parse(s).is_none() {
            return Err(ApiError::malformed(format!(
                "state `{s}` is none of RUNNING, WAITING, COMPLETED, TERMINATED, FAILED, COMPENSATED"
            )));
        }
    }
    if let Some(p) = &q.process {
        check_id("process", p)?;
    }
    if let Some(a) = &q.after {
        check_id("instance", a)?;
    }
    let newest = match q.order.as_deref() {
        None | Some("oldest") => false,
        Some("newest") => true,
        Some(other) => {
            return Err(ApiError::malformed(format!(
                "order `{other}` is neither `oldest` nor `newest`"
            )))
        }
    };
    let within = started_within(q.since.as_deref(), q.until.as_deref())?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::malformed(format!(
            "limit must be from 1 to {MAX_PAGE}"
        )));
    }
    // Ids begin with their start instant, so both orders page by id: oldest
    // first from `since` (or the cursor) up, newest first from `until` (or
    // the cursor) down; the first row past the other bound ends the listing.
    let (after_id, before_id) = if newest {
        let before = match (q.after, within.before.clone()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (None, before)
    } else {
        let after = match (q.after, within.from.clone()) {
            (a, None) => a,
            // Every id of a start at `since` or later sorts after these 12 digits alone.
            (a, Some(bound)) => Some(a.filter(|a| *a > bound).unwrap_or(bound)),
        };
        (after, None)
    };
    let rows = state
        .runtime
        .store()
        .list_instances(&InstanceFilter {
            tenant: Some(tenant),
            state: q.state,
            process_id: q.process,
            deployment_id: None,
            after_id,
            before_id,
            newest_first: newest,
            business_key: q.business_key,
            vars,
            error_code: q.error_code,
            failed_node: q.failed_node,
            limit: limit + 1,
        })
        .await?;
    let rows: Vec<_> = rows
        .into_iter()
        .take_while(|r| match newest {
            false => within.before.as_deref().is_none_or(|b| r.id.as_str() < b),
            true => within.from.as_deref().is_none_or(|f| r.id.as_str() >= f),
        })
        .collect();
    let more = rows.len() as i64 > limit;
    let page: Vec<InstanceSummary> = rows.iter().take(limit as usize).map(Into::into).collect();
    let next = if more {
        page.last().map(|s| s.id.clone())
    } else {
        None
    };
    Ok(Json(InstanceList {
        instances: page,
        next,
    }))
}

/// At most this many `var.` filters in one listing.
const MAX_VAR_FILTERS: usize = 8;

/// The `var.NAME=VALUE` parameters of a listing as index lookups; an empty
/// name, a name or value the index cannot hold, or too many is a 400.
fn search_filters(vars: Vec<(String, String)>) -> ApiResult<Vec<crate::store::SearchVar>> {
    use crate::store::{SearchVar, SEARCH_VALUE_MAX};
    if vars.len() > MAX_VAR_FILTERS {
        return Err(ApiError::malformed(format!(
            "at most {MAX_VAR_FILTERS} var. filters in one listing"
        )));
    }
    vars.into_iter()
        .map(|(name, value)| {
            if name.is_empty() || name.len() > SEARCH_VALUE_MAX || value.len() > SEARCH_VALUE_MAX {
                return Err(ApiError::malformed(format!(
                    "var.{name}: a variable filter is var.NAME=VALUE with a name and a value of 1 to {SEARCH_VALUE_MAX} bytes"
                )));
            }
            Ok(SearchVar { name, value })
        })
        .collect()
}

/// A business key is 1 to 256 bytes without control characters, else a 400.
pub(super) fn check_business_key(key: &str) -> ApiResult<()> {
    if key.is_empty()
        || key.len() > crate::store::SEARCH_VALUE_MAX
        || key.chars().any(char::is_control)
    {
        return Err(ApiError::malformed(format!(
            "businessKey must be 1 to {} bytes without control characters",
            crate::store::SEARCH_VALUE_MAX
        )));
    }
    Ok(())
}

/// The longest error code or node id a filter takes (bytes).
const FAILURE_FILTER_MAX: usize = 256;

/// `errorCode` and `failedNode` filters (each named as the caller wrote
/// it): 1 to 256 bytes without control characters, else a 400.
pub(super) fn check_failure_filters(
    code_name: &str,
    code: Option<&str>,
    node_name: &str,
    node: Option<&str>,
) -> ApiResult<()> {
    for (name, value) in [(code_name, code), (node_name, node)] {
        if let Some(v) = value {
            if v.is_empty() || v.len() > FAILURE_FILTER_MAX || v.chars().any(char::is_control) {
                return Err(ApiError::malformed(format!(
                    "{name} must be 1 to {FAILURE_FILTER_MAX} bytes without control characters"
                )));
            }
        }
    }
    Ok(())
}

/// The instances started within `since..=until` as a range of ids.
///
/// Ids begin with their start instant (12 hex digits of ms; a child flow's
/// with its parent's), so a start-time bound is a keyset bound: the listing
/// pages by it and the counts use the same rule, so both always agree.
#[derive(Debug, Default, PartialEq)]
pub(super) struct StartedWithin {
    /// Ids at or after this (the 12 digits of `since`).
    pub from: Option<String>,
    /// Ids strictly before this (the 12 digits of `until` + 1 ms).
    pub before: Option<String>,
}

/// `since` and `until` (RFC 3339, either optional) as ids; a malformed one is a 400.
pub(super) fn started_within(since: Option<&str>, until: Option<&str>) -> ApiResult<StartedWithin> {
    let digits = |ms: i64| format!("{:012x}", ms.clamp(0, 0xffff_ffff_ffff));
    Ok(StartedWithin {
        from: instant("since", since)?.map(digits),
        before: instant("until", until)?.map(|ms| digits(ms.saturating_add(1))),
    })
}

/// An optional RFC 3339 query parameter, in ms.
fn instant(name: &str, value: Option<&str>) -> ApiResult<Option<i64>> {
    value
        .map(|s| {
            chrono::DateTime::parse_from_rfc3339(s)
                .map(|t| t.timestamp_millis())
                .map_err(|_| {
                    ApiError::malformed(format!(
                        "{name} `{s}` is no RFC 3339 instant (e.g. 2030-01-01T00:00:00Z)"
                    ))
                })
        })
        .transpose()
}

/// Inspect an instance (a retained terminal one answers too).
#[utoipa::path(get, path = "/v1/instances/{id}", tag = "instances",
    responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
pub async fn inspect(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<InstanceView>> {
    own_instance(&state, &tenant, &id).await?;
    view(&state, &id).await
}

/// The instance's history (the audit journal; empty with a note when it is off).
#[utoipa::path(get, path = "/v1/instances/{id}/history", tag = "instances",
    responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
pub async fn history(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<HistoryView>> {
    own_instance(&state, &tenant, &id).await?;
    Ok(Json(state.runtime.history(&id).await?))
}

fn is_terminal(rec: &InstanceRecord) -> bool {
    InstanceState::parse(&rec.state).is_some_and(InstanceState::is_terminal)
}

/// Cancel a live instance: TERMINATED, its parks withdrawn in the same transaction.
#[utoipa::path(post, path = "/v1/instances/{id}/cancel", tag = "instances", request_body = CancelBody,
    responses((status = 200, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CancelBody>,
) -> ApiResult<Json<InstanceView>> {
    let rec = own_instance(&state, &tenant, &id).await?;
    if is_terminal(&rec) {
        return Err(ApiError::new(
            Code::InstanceState,
            format!("instance {id} is {} already", rec.state),
        ));
    }
    state.runtime.cancel(&id, body.reason).await?;
    view(&state, &id).await
}

/// Close a FAILED instance an operator has dealt with: it stays FAILED, no
/// longer keeps its deployment DRAINING, and retention deletes it
/// `sutra.instance.retention` after the close. Journaled with the reason.
#[utoipa::path(post, path = "/v1/instances/{id}/close", tag = "instances", request_body = CloseBody,
    responses((status = 200, body = Object), (status = 404, body = ErrorBody),
        (status = 409, description = "SUTRA.RUNTIME.INSTANCE_STATE: not FAILED, or closed already", body = ErrorBody)))]
pub async fn close(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CloseBody>,
) -> ApiResult<Json<InstanceView>> {
    check_id("instance", &id)?;
    state.runtime.close(&tenant, &id, body.reason).await?;
    view(&state, &id).await
}

/// Retry a terminal instance as a new one linked by `retryOf`: `full`
/// replays its original input; `from-failure` resumes a FAILED one at its
/// failed step with its recorded variables.
#[utoipa::path(post, path = "/v1/instances/{id}/retry", tag = "instances",
    params(("mode" = Option<String>, Query, description = "full (default) or from-failure")),
    responses((status = 201, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn retry(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<RetryQuery>,
) -> ApiResult<(StatusCode, Json<InstanceView>)> {
    check_id("instance", &id)?;
    let raw = q.mode.as_deref().unwrap_or("full");
    let mode = RetryMode::parse(raw).ok_or_else(|| {
        ApiError::malformed(format!("mode `{raw}` is neither `full` nor `from-failure`"))
    })?;
    let answered = state.runtime.retry(&tenant, &id, mode, None).await?;
    // Deleted at its end (retention PT0S): its final state.
    if let Some(ended) = answered.deleted {
        return Ok((StatusCode::CREATED, Json(ended)));
    }
    let new_id = answered.id;
    Ok((StatusCode::CREATED, view(&state, &new_id).await?))
}

/// Deliver a message: to a waiting catch or boundary with this name and
/// key, else to a message start event; no match → 404.
#[utoipa::path(post, path = "/v1/messages", tag = "instances", request_body = MessageBody,
    responses((status = 200, body = MessageAnswer), (status = 404, body = ErrorBody)))]
pub async fn message(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiJson(body): ApiJson<MessageBody>,
) -> ApiResult<Json<MessageAnswer>> {
    if body.name.is_empty() || body.name.len() > 256 {
        return Err(ApiError::malformed(
            "a message needs a `name` of 1 to 256 characters",
        ));
    }
    let instance = state
        .runtime
        .correlate(
            &tenant,
            &body.name,
            body.correlation_key.as_deref(),
            body.variables,
        )
        .await?;
    Ok(Json(MessageAnswer { instance }))
}
