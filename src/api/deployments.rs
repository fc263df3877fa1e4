//! `/v1/deployments`: upload a bundle (one definition + the task modules it
//! names, multipart), list, show, undeploy, and a deployment's schedules.
//!
//! Invariant: a bundle is validated whole before anything is stored (the
//! runtime's deploy): an invalid definition → 422 with the `sutra check`
//! diagnostics; a missing or invalid module → 422 naming it in
//! `details.module`; a part naming no task of the definition → 400.

use super::auth::TenantCaller;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiMultipart};
use super::types::{DeploymentBody, DeploymentList, ErrorBody, ScheduleList};
use super::AppState;
use crate::codes::Code;
use crate::sandbox::Reuse;
use crate::store::tenancy::TenancyStore;
use crate::store::{DeploymentRecord, ModuleReuse, Store};
use axum::extract::multipart::MultipartError;
use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The multipart part that carries the definition.
pub const DEFINITION_PART: &str = "definition";

/// The optional multipart part naming the modules deployed reusable (warm
/// instances, docs in README "Warm instances"): items `NAME`,
/// `NAME:MAX_REUSES` or `NAME:MAX_REUSES:MEMORY_CEILING_BYTES`, separated by
/// commas or white space.
pub const REUSABLE_PART: &str = "reusable";

/// Parse the `reusable` part.
fn parse_reusable(text: &str) -> ApiResult<BTreeMap<String, ModuleReuse>> {
    let mut out = BTreeMap::new();
    for item in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|i| !i.is_empty())
    {
        let mut fields = item.split(':');
        let name = fields.next().unwrap_or_default();
        check_id("module", name).map_err(|_| {
            ApiError::malformed(format!(
                "the `reusable` part names an invalid module: {item:?}"
            ))
        })?;
        let number = |what: &str, v: Option<&str>| -> ApiResult<Option<u64>> {
            v.map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::malformed(format!(
                        "the `reusable` part's {what} for `{name}` is not a whole number: {v:?}"
                    ))
                })
            })
            .transpose()
        };
        let max_reuses = number("reuse count", fields.next())?
            .map_or(Ok(Reuse::DEFAULT_MAX_REUSES), u32::try_from)
            .map_err(|_| {
                ApiError::malformed(format!(
                    "the `reusable` part's reuse count for `{name}` is too large"
                ))
            })?;
        let memory_ceiling_bytes =
            number("memory ceiling", fields.next())?.unwrap_or(Reuse::DEFAULT_MEMORY_CEILING_BYTES);
        if fields.next().is_some() {
            return Err(ApiError::malformed(format!(
                "the `reusable` part's item {item:?} has more than NAME:MAX_REUSES:MEMORY_CEILING_BYTES"
            )));
        }
        let reuse = ModuleReuse {
            max_reuses,
            memory_ceiling_bytes,
        };
        if out.insert(name.to_string(), reuse).is_some() {
            return Err(ApiError::malformed(format!(
                "the `reusable` part names `{name}` twice"
            )));
        }
    }
    Ok(out)
}

/// What a bundle holds.
struct Bundle {
    definition: String,
    modules: BTreeMap<String, Vec<u8>>,
    reusable: BTreeMap<String, ModuleReuse>,
}

fn multipart_error(e: MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::ApiPayloadTooLarge,
            "the bundle is over the server's size cap",
        )
    } else {
        ApiError::malformed(format!(
            "the bundle is not valid multipart/form-data: {}",
            e.body_text()
        ))
    }
}

/// Read the bundle: the definition text, module name → bytes, the reusable ones.
async fn read_bundle(mut form: Multipart) -> ApiResult<Bundle> {
    let mut definition = None;
    let mut modules = BTreeMap::new();
    let mut reusable = None;
    while let Some(field) = form.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_string();
        let bytes = field.bytes().await.map_err(multipart_error)?;
        if name == DEFINITION_PART {
            if definition.is_some() {
                return Err(ApiError::malformed("the bundle has two `definition` parts"));
            }
            let text = String::from_utf8(bytes.to_vec())
                .map_err(|_| ApiError::malformed("the `definition` part is not UTF-8 text"))?;
            definition = Some(text);
        } else if name == REUSABLE_PART {
            if reusable.is_some() {
                return Err(ApiError::malformed("the bundle has two `reusable` parts"));
            }
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| ApiError::malformed("the `reusable` part is not UTF-8 text"))?;
            reusable = Some(parse_reusable(text)?);
        } else {
            check_id("module", &name).map_err(|_| {
                ApiError::malformed("a part has no name or an invalid one: name each module part after its registered task")
            })?;
            if modules.insert(name.clone(), bytes.to_vec()).is_some() {
                return Err(ApiError::malformed(format!(
                    "the bundle has two parts named `{name}`"
                )));
            }
        }
    }
    let definition = definition.ok_or_else(|| {
        ApiError::malformed("the bundle has no `definition` part (the process definition)")
    })?;
    let reusable = reusable.unwrap_or_default();
    if let Some(name) = reusable.keys().find(|n| !modules.contains_key(*n)) {
        return Err(ApiError::malformed(format!(
            "the `reusable` part names `{name}`, which is no module part of the bundle"
        ))
        .with_details(json!({ "module": name })));
    }
    Ok(Bundle {
        definition,
        modules,
        reusable,
    })
}

/// The registered tasks the definition's executable processes call (when it loads).
fn called_tasks(source: &str) -> Option<Vec<String>> {
    let loaded = crate::dialect::load(source);
    if !loaded.ok() {
        return None;
    }
    let mut names: Vec<String> = loaded
        .definitions
        .processes
        .iter()
        .filter(|p| p.executable)
        .flat_map(|p| p.registered_tasks().into_iter().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    Some(names)
}

/// The code a missing module is refused with (`ResourceNotFound` for a
/// States-language `Resource`; see `Process::missing_module_code`).
fn missing_code(source: &str, name: &str) -> Code {
    crate::dialect::load(source)
        .definitions
        .processes
        .iter()
        .map(|p| p.missing_module_code(name))
        .find(|c| *c != Code::TaskNotRegistered)
        .unwrap_or(Code::TaskNotRegistered)
}

/// The module a runtime error is about (`module \`name\`: ...`).
fn module_named(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("module `")?;
    rest.split_once('`').map(|(name, _)| name)
}

/// Deploy a bundle.
#[utoipa::path(post, path = "/v1/deployments", tag = "deployments",
    request_body(content_type = "multipart/form-data", description = "a `definition` part and one part per registered task, named after it"),
    responses((status = 201, body = DeploymentList), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn deploy(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiMultipart(form): ApiMultipart,
) -> ApiResult<(StatusCode, Json<DeploymentList>)> {
    let answer = deploy_bundle(&state, &tenant, form).await;
    // The bundle (megabytes of modules, refused or not) and what loading
    // them allocated are freed by now: hand that memory back at once, so a
    // hostile upload leaves the server as it found it (src/alloc.rs).
    crate::alloc::release_free_memory();
    answer
}

async fn deploy_bundle(
    state: &AppState,
    tenant: &str,
    form: Multipart,
) -> ApiResult<(StatusCode, Json<DeploymentList>)> {
    let Bundle {
        definition: source,
        modules,
        reusable,
    } = read_bundle(form).await?;
    if let Some(called) = called_tasks(&source) {
        if let Some(missing) = called.iter().find(|n| !modules.contains_key(*n)) {
            return Err(ApiError::new(
                missing_code(&source, missing),
                format!("the definition calls registered:{missing} but the bundle has no part `{missing}`"),
            )
            .with_details(json!({ "module": missing })));
        }
        if let Some(extra) = modules.keys().find(|n| !called.contains(n)) {
            return Err(ApiError::malformed(format!(
                "the bundle's part `{extra}` is no registered task of the definition"
            ))
            .with_details(json!({ "module": extra })));
        }
    }
    let records = state
        .runtime
        .deploy_reusable(tenant, &source, &modules, &reusable)
        .await
        .map_err(|e| {
            let module = module_named(&e.message).map(str::to_string);
            let err = ApiError::from(e);
            match module {
                Some(m) if err.details.is_null() => err.with_details(json!({ "module": m })),
                _ => err,
            }
        })?;
    let deployments = records
        .iter()
        .map(|r| DeploymentBody::of(r, false))
        .collect();
    Ok((StatusCode::CREATED, Json(DeploymentList { deployments })))
}

/// The caller's deployment `id`, or 404 (another tenant's too).
pub(crate) async fn own_deployment(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> ApiResult<DeploymentRecord> {
    check_id("deployment", id)?;
    state
        .runtime
        .store()
        .get_deployment(id)
        .await?
        .filter(|d| d.tenant == tenant)
        .ok_or_else(|| ApiError::deployment_not_found(id))
}

/// List the caller's deployments (every version, every state).
#[utoipa::path(get, path = "/v1/deployments", tag = "deployments", responses((status = 200, body = DeploymentList)))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
) -> ApiResult<Json<DeploymentList>> {
    let all = state
        .runtime
        .store()
        .list_deployments(Some(&tenant))
        .await?;
    Ok(Json(DeploymentList {
        deployments: all.iter().map(|d| DeploymentBody::of(d, false)).collect(),
    }))
}

/// One deployment, with its definition text.
#[utoipa::path(get, path = "/v1/deployments/{id}", tag = "deployments",
    responses((status = 200, body = DeploymentBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<DeploymentBody>> {
    let d = own_deployment(&state, &tenant, &id).await?;
    Ok(Json(DeploymentBody::of(&d, true)))
}

/// Undeploy: no new starts; the deployment drains, then retires.
#[utoipa::path(delete, path = "/v1/deployments/{id}", tag = "deployments",
    responses((status = 200, body = DeploymentBody), (status = 404, body = ErrorBody)))]
pub async fn undeploy(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<DeploymentBody>> {
    own_deployment(&state, &tenant, &id).await?;
    let d = state.runtime.undeploy(&tenant, &id).await?;
    Ok(Json(DeploymentBody::of(&d, false)))
}

/// A deployment's schedules (timer start events) and their fire journal.
#[utoipa::path(get, path = "/v1/deployments/{id}/schedules", tag = "deployments",
    responses((status = 200, body = ScheduleList), (status = 404, body = ErrorBody)))]
pub async fn schedules(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleList>> {
    own_deployment(&state, &tenant, &id).await?;
    let store = state.runtime.store();
    let schedules = store.schedules_of(&id).await?;
    let events = store.schedule_events(&id).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.iter().map(Into::into).collect(),
        events: events.iter().map(Into::into).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_of_an_error_is_found() {
        assert_eq!(
            module_named("module `chaos`: not a component"),
            Some("chaos")
        );
        assert_eq!(module_named("the definition is invalid"), None);
    }
}
