//! `/v1/admin/*`: tenants and their keys and quotas (the admin key only),
//! and the test clock (`--manual-clock` only).
//!
//! Invariant: a tenant key never reaches these handlers (403), and a new key
//! is answered once and never stored in the clear; a key listing shows ids
//! and prefixes, never a secret or a hash; a revoked key stops working at
//! once (authentication reads the store on every request).

use super::auth::{add_key, create_tenant, rotate_keys, AdminCaller};
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiJson};
use super::types::{
    AdvanceBody, ApiKeyBody, ApiKeyList, ClockBody, ErrorBody, LimitsBody, NewTenantBody,
    RevokedBody, TenantBody, TenantList,
};
use super::AppState;
use crate::codes::Code;
use crate::runtime::Runtime;
use crate::store::tenancy::TenancyStore;
use crate::store::{AnyStore, StoreError};
use crate::time::{from_millis, to_millis, IsoDuration, VirtualClock};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use std::sync::Arc;

fn now_ms(state: &AppState) -> i64 {
    to_millis(state.runtime.clock().now())
}

/// Create a tenant; answers its first key (once).
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", request_body = NewTenantBody,
    responses((status = 201, body = TenantBody), (status = 409, body = ErrorBody)))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    ApiJson(body): ApiJson<NewTenantBody>,
) -> ApiResult<(StatusCode, Json<TenantBody>)> {
    let limits = body.limits.to_limits().map_err(ApiError::malformed)?;
    if !super::auth::valid_tenant_name(&body.name) {
        return Err(ApiError::malformed(
            "a tenant `name` is 1 to 63 of a-z, 0-9, - and _ (starting with a letter or digit)",
        ));
    }
    match create_tenant(state.runtime.store(), &body.name, limits, now_ms(&state)).await {
        Ok((tenant, key)) => Ok((
            StatusCode::CREATED,
            Json(TenantBody::of(&tenant, Some(key))),
        )),
        Err(StoreError::Duplicate(_)) => Err(ApiError::new(
            Code::TenantExists,
            format!("tenant `{}` exists already", body.name),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Every tenant.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin", responses((status = 200, body = TenantList)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
) -> ApiResult<Json<TenantList>> {
    let tenants = state.runtime.store().list_tenants().await?;
    Ok(Json(TenantList {
        tenants: tenants.iter().map(|t| TenantBody::of(t, None)).collect(),
    }))
}

async fn tenant_or_404(
    state: &AppState,
    name: &str,
) -> ApiResult<crate::store::tenancy::TenantRecord> {
    check_id("tenant", name)?;
    state
        .runtime
        .store()
        .get_tenant(name)
        .await?
        .ok_or_else(|| ApiError::new(Code::TenantNotFound, format!("no tenant `{name}`")))
}

/// One tenant.
#[utoipa::path(get, path = "/v1/admin/tenants/{name}", tag = "admin",
    responses((status = 200, body = TenantBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<TenantBody>> {
    Ok(Json(TenantBody::of(
        &tenant_or_404(&state, &name).await?,
        None,
    )))
}

/// Replace a tenant's quotas (null = unlimited).
#[utoipa::path(put, path = "/v1/admin/tenants/{name}/limits", tag = "admin", request_body = LimitsBody,
    responses((status = 200, body = TenantBody), (status = 404, body = ErrorBody)))]
pub async fn set_limits(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<LimitsBody>,
) -> ApiResult<Json<TenantBody>> {
    tenant_or_404(&state, &name).await?;
    let limits = body.to_limits().map_err(ApiError::malformed)?;
    state
        .runtime
        .store()
        .set_tenant_limits(&name, &limits)
        .await?;
    state.runtime.forget_tenant(&name);
    Ok(Json(TenantBody::of(
        &tenant_or_404(&state, &name).await?,
        None,
    )))
}

/// Add a key to a tenant; answers it (once).
#[utoipa::path(post, path = "/v1/admin/tenants/{name}/keys", tag = "admin",
    responses((status = 201, body = TenantBody), (status = 404, body = ErrorBody)))]
pub async fn new_key(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<TenantBody>)> {
    let tenant = tenant_or_404(&state, &name).await?;
    let key = add_key(state.runtime.store(), &name, now_ms(&state)).await?;
    Ok((
        StatusCode::CREATED,
        Json(TenantBody::of(&tenant, Some(key))),
    ))
}

/// A tenant's keys: ids and prefixes, never the secrets.
#[utoipa::path(get, path = "/v1/admin/tenants/{name}/keys", tag = "admin",
    responses((status = 200, body = ApiKeyList), (status = 404, body = ErrorBody)))]
pub async fn list_keys(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<Json<ApiKeyList>> {
    tenant_or_404(&state, &name).await?;
    let keys = state.runtime.store().api_keys_of(&name).await?;
    Ok(Json(ApiKeyList {
        tenant: name,
        keys: keys.iter().map(ApiKeyBody::of).collect(),
    }))
}

/// Revoke one key of a tenant: it stops working at once.
#[utoipa::path(delete, path = "/v1/admin/tenants/{name}/keys/{key_id}", tag = "admin",
    responses((status = 200, body = RevokedBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_key(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path((name, key_id)): Path<(String, String)>,
) -> ApiResult<Json<RevokedBody>> {
    tenant_or_404(&state, &name).await?;
    check_id("key", &key_id)?;
    if !state.runtime.store().delete_api_key(&name, &key_id).await? {
        return Err(ApiError::new(
            Code::TenantKeyNotFound,
            format!(
                "tenant `{name}` has no key `{key_id}` (see GET /v1/admin/tenants/{name}/keys)"
            ),
        ));
    }
    tracing::info!(tenant = %name, key = %key_id, "API key revoked");
    Ok(Json(RevokedBody {
        tenant: name,
        revoked: vec![key_id],
    }))
}

/// Rotate a tenant's keys: answers a new key (once) and revokes every other
/// key of the tenant in the same transaction.
#[utoipa::path(post, path = "/v1/admin/tenants/{name}/keys/rotate", tag = "admin",
    responses((status = 201, body = TenantBody), (status = 404, body = ErrorBody)))]
pub async fn rotate(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<TenantBody>)> {
    let tenant = tenant_or_404(&state, &name).await?;
    let (key, revoked) = rotate_keys(state.runtime.store(), &name, now_ms(&state)).await?;
    tracing::info!(tenant = %name, revoked = revoked.len(), "API keys rotated");
    let mut body = TenantBody::of(&tenant, Some(key));
    body.revoked = Some(revoked);
    Ok((StatusCode::CREATED, Json(body)))
}

/// Advance the manual clock, firing every park and schedule due on the way,
/// slot by slot, as a server up all along would have. Only with `--manual-clock`.
#[utoipa::path(post, path = "/v1/admin/clock/advance", tag = "admin", request_body = AdvanceBody,
    responses((status = 200, body = ClockBody), (status = 404, body = ErrorBody)))]
pub async fn advance(
    State(state): State<Arc<AppState>>,
    _admin: AdminCaller,
    ApiJson(body): ApiJson<AdvanceBody>,
) -> ApiResult<Json<ClockBody>> {
    let Some(clock) = state.config.manual_clock.clone() else {
        return Err(ApiError::new(
            Code::ApiNotFound,
            "the clock is not manual (start the server with --manual-clock)",
        ));
    };
    let now = state.runtime.clock().now();
    let target = match (&body.by, &body.to) {
        (Some(by), None) => IsoDuration::parse(by)
            .map_err(|e| ApiError::malformed(e.message))?
            .after(now),
        (None, Some(to)) => crate::time::parse_date_time(to)
            .map_err(|e| ApiError::malformed(e.message))?
            .with_timezone(&Utc),
        _ => {
            return Err(ApiError::malformed(
                "give exactly one of `by` (a duration) and `to` (an instant)",
            ))
        }
    };
    let _one_at_a_time = state.clock_lock.lock().await;
    run_until(&state.runtime, &clock, target).await?;
    Ok(Json(ClockBody {
        now: state.runtime.clock().now(),
    }))
}

/// Most steps one advance takes (each a due instant); a guard, not a limit tests meet.
const MAX_STEPS: usize = 100_000;

/// Drive everything due up to `target`, jumping the clock from one due
/// instant to the next, then to `target`.
pub async fn run_until(
    rt: &Runtime<AnyStore>,
    clock: &VirtualClock,
    target: DateTime<Utc>,
) -> ApiResult<()> {
    for _ in 0..MAX_STEPS {
        rt.fire_due().await?;
        let next_schedule = rt.tick_schedules().await?;
        let next_batch = rt.work_due_batches().await?;
        let next_park = rt.next_due_work().await;
        let next = [next_park, next_schedule, next_batch]
            .into_iter()
            .flatten()
            .min();
        let now = to_millis(rt.clock().now());
        match next {
            Some(n) if n <= to_millis(target) && n > now => clock.advance_to(from_millis(n)),
            _ => break,
        }
    }
    clock.advance_to(target);
    rt.fire_due().await?;
    rt.tick_schedules().await?;
    rt.work_due_batches().await?;
    if let Err(e) = rt.retire_drained().await {
        tracing::warn!(error = %e, "retirement pass failed");
    }
    Ok(())
}
