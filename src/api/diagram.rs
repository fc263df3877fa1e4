//! What the web console reads beyond the other routes, all public `/v1`
//! routes: a deployment's diagram (BPMN XML with DI, for every dialect —
//! see [`crate::diagram`]) and its modules with their sizes; an instance's
//! attempts in full (durations, messages, error classes) with the failures
//! its external-task workers reported; a tenant's instance counts by state.
//!
//! Invariant: a tenant sees only its own deployments and instances (another
//! tenant's id answers 404, as everywhere).

use super::auth::TenantCaller;
use super::deployments::own_deployment;
use super::error::{ApiError, ApiResult};
use super::extract::{check_id, ApiQuery};
use super::instances::{own_instance, started_within};
use super::types::ErrorBody;
use super::AppState;
use crate::codes::Code;
use crate::runtime::ItemRef;
use crate::store::channels::{ChannelStore, WorkerFailureRecord};
use crate::store::tenancy::TenancyStore;
use crate::store::{AttemptOutput, Store};
use crate::time::from_millis;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use utoipa::ToSchema;

/// The header telling whether a diagram was generated from the IR (`generated`) or is the deployed XML (`original`).
pub const DIAGRAM_SOURCE: &str = "x-sutra-diagram";

/// The deployment's process as BPMN 2.0 XML with diagram interchange: the
/// deployed file when its DI places every node, else exported from the IR
/// and laid out (BPMN without DI, HX, the States language). Each exported
/// element carries its node's id in `sutra:node`.
#[utoipa::path(get, path = "/v1/deployments/{id}/diagram", tag = "deployments",
    responses((status = 200, content_type = "application/xml", body = String,
        headers(("x-sutra-diagram" = String, description = "`original` or `generated`"))),
        (status = 404, body = ErrorBody)))]
pub async fn diagram(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let d = own_deployment(&state, &tenant, &id).await?;
    let source = d.source.clone();
    let process = d.process_id.clone();
    // Loading and laying out is CPU work: off the async workers.
    let diagram = tokio::task::spawn_blocking(move || {
        crate::dialect::load(&source)
            .definitions
            .processes
            .iter()
            .find(|p| p.id == process)
            .map(|p| crate::diagram::diagram(&source, p))
    })
    .await
    .map_err(ApiError::internal)?
    .ok_or_else(|| {
        ApiError::internal(format!(
            "deployment {id} no longer loads its process {}",
            d.process_id
        ))
    })?;
    let source = if diagram.generated {
        "generated"
    } else {
        "original"
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/xml; charset=utf-8"),
            (header::HeaderName::from_static(DIAGRAM_SOURCE), source),
            // Tenant-written XML: never active content, even if opened directly.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; sandbox",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        diagram.xml,
    )
        .into_response())
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleBody {
    /// The registered task name.
    pub name: String,
    /// sha256 of the module.
    pub digest: String,
    /// Its size in bytes (null when the store no longer holds it).
    pub bytes: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModuleList {
    pub modules: Vec<ModuleBody>,
}

/// The deployment's task modules with their digests and sizes.
#[utoipa::path(get, path = "/v1/deployments/{id}/modules", tag = "deployments",
    responses((status = 200, body = ModuleList), (status = 404, body = ErrorBody)))]
pub async fn modules(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<ModuleList>> {
    let d = own_deployment(&state, &tenant, &id).await?;
    let mut modules = Vec::with_capacity(d.modules.len());
    for (name, digest) in &d.modules {
        let bytes = state
            .runtime
            .store()
            .get_module(&tenant, digest)
            .await?
            .map(|b| b.len() as u64);
        modules.push(ModuleBody {
            name: name.clone(),
            digest: digest.clone(),
            bytes,
        });
    }
    Ok(Json(ModuleList { modules }))
}

/// One attempt of a task, in full.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptBody {
    /// The node (task) it ran.
    pub task: String,
    pub token: i64,
    /// 1-based; 2 is the first retry.
    pub attempt: i64,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub duration_ms: i64,
    /// `completed`, `business_error`, `failed`, `skipped`,
    /// `compensation_failed`, or `worker_failed` (an external-task worker
    /// reported a failure of the call's task: the worker's message, code
    /// `SUTRA.RUNTIME.EXTERNAL_TASK.FAILED`, an instant: it starts and ends
    /// when reported).
    pub outcome: String,
    pub code: Option<String>,
    /// The error class of a failure: the one stored with it (a guest's own
    /// class for its own code), else its Sutra code's.
    pub class: Option<String>,
    pub message: Option<String>,
    /// The worker that reported a `worker_failed` row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The worker retries a `worker_failed` row left (0: an incident was opened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries_left: Option<i64>,
    /// The end of what the guest wrote to stderr (at most 4 KiB, a leading
    /// marker when cut); absent when it wrote nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Its last `host.log` lines (at most 32 holding 4 KiB of text, a first
    /// marker line when earlier ones were not kept).
    pub logs: Vec<LogLineBody>,
    /// Its outbound HTTP calls (method, scheme, host, port, path without
    /// query, status, bytes, duration; each denial with
    /// `SUTRA.TASK.EGRESS_DENIED` and its reason), the first 32; absent when
    /// it made none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<crate::egress::CallRecord>,
    /// The attempt's input (JSON; a string ending in a `[cut: N bytes in
    /// all]` marker when it was over 64 KiB); absent for attempts recorded
    /// before inputs were kept, and for a worker's failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Its output (a completion's) or its failure's details, bounded alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// The fan-out item it ran in (a Map item, a Parallel branch, a BPMN
    /// multi-instance iteration: the innermost one), kept with the attempt
    /// so it names its item also after the fan-out ended; absent outside any
    /// fan-out and for attempts recorded before items were kept. A
    /// `worker_failed` row has its call's, once an attempt of the call is
    /// recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<ItemRef>,
}

/// Stored step JSON as a value; text that is no JSON (cut) as a string.
fn step_json(text: Option<String>) -> Option<Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)))
}

/// One line a guest logged.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LogLineBody {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptList {
    pub instance: String,
    pub attempts: Vec<AttemptBody>,
}

/// Every attempt of an instance, oldest first, with durations, messages and
/// the tails of what its guest wrote (stderr, log lines); the failures its
/// external-task workers reported are among them (`worker_failed`), in time
/// order.
#[utoipa::path(get, path = "/v1/instances/{id}/attempts", tag = "instances",
    responses((status = 200, body = AttemptList), (status = 404, body = ErrorBody)))]
pub async fn attempts(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<AttemptList>> {
    own_instance(&state, &tenant, &id).await?;
    let store = state.runtime.store();
    let rows = store.attempts(&id).await?;
    let mut outputs: HashMap<(i64, String, i64), AttemptOutput> = store
        .attempt_outputs(&id)
        .await?
        .into_iter()
        .map(|o| ((o.token, o.node.clone(), o.attempt), o))
        .collect();
    let attempts = rows
        .into_iter()
        .map(|a| {
            let out = outputs.remove(&(a.token, a.node.clone(), a.attempt));
            let (stderr, logs, calls, io) = out.map_or((None, None, None, (None, None)), |o| {
                (o.stderr, o.logs, o.calls, (o.input, o.output))
            });
            (a, stderr, logs, calls, io)
        })
        .map(|(a, stderr, logs, calls, (input, output))| AttemptBody {
            item: ItemRef::of(&a),
            input: step_json(input),
            output: step_json(output),
            calls: calls.and_then(|c| serde_json::from_str(&c).ok()),
            class: a.shown_class(),
            task: a.node,
            token: a.token,
            attempt: a.attempt,
            started_at: from_millis(a.started_at),
            ended_at: from_millis(a.ended_at),
            duration_ms: a.ended_at.saturating_sub(a.started_at),
            outcome: a.outcome,
            code: a.code,
            message: a.message,
            worker: None,
            retries_left: None,
            stderr,
            logs: logs
                .and_then(|l| serde_json::from_str(&l).ok())
                .unwrap_or_default(),
        })
        .collect();
    let failures = store.worker_failures(&id).await?;
    Ok(Json(AttemptList {
        instance: id,
        attempts: with_worker_failures(attempts, failures),
    }))
}

/// `attempts` (in the order they were recorded, which is the order they
/// ended) with each worker failure placed in time: before the first row that
/// ended after it, or that ended at the same instant and is its own call
/// attempt's record (the answer that ended the call), else last.
fn with_worker_failures(
    mut attempts: Vec<AttemptBody>,
    failures: Vec<WorkerFailureRecord>,
) -> Vec<AttemptBody> {
    for f in failures {
        let at = from_millis(f.at);
        let own = |a: &AttemptBody| {
            a.outcome != WORKER_FAILED
                && a.token == f.token
                && a.task == f.node
                && a.attempt == f.call_attempt
        };
        let ix = attempts
            .iter()
            .position(|a| a.ended_at > at || (a.ended_at == at && own(a)))
            .unwrap_or(attempts.len());
        let code = Code::ExternalTaskFailed;
        // A token runs in one item all its life: its call's attempts name it.
        let item = attempts
            .iter()
            .find(|a| a.token == f.token && a.item.is_some())
            .and_then(|a| a.item.clone());
        attempts.insert(
            ix,
            AttemptBody {
                task: f.node,
                token: f.token,
                attempt: f.call_attempt,
                started_at: at,
                ended_at: at,
                duration_ms: 0,
                outcome: WORKER_FAILED.to_string(),
                code: Some(code.as_str().to_string()),
                class: Some(code.class().as_str().to_string()),
                message: Some(f.message),
                worker: Some(f.worker),
                retries_left: Some(f.retries_left),
                stderr: None,
                calls: None,
                logs: Vec::new(),
                input: None,
                output: None,
                item,
            },
        );
    }
    attempts
}

/// The outcome of a worker's failure among the attempts.
const WORKER_FAILED: &str = "worker_failed";

/// `GET /v1/instances/counts` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountsQuery {
    pub process: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CountsBody {
    /// State → number of the caller's instances in it (every state, zeros included).
    pub counts: BTreeMap<String, i64>,
    pub total: i64,
    /// Of the FAILED, how many a retry took over (the others still need
    /// attention).
    pub retried: i64,
}

/// The caller's instances counted by state (optionally of one process, and
/// started within `since`..`until`: the same bounds as `GET /v1/instances`).
#[utoipa::path(get, path = "/v1/instances/counts", tag = "instances",
    params(("process" = Option<String>, Query),
        ("since" = Option<String>, Query, description = "only instances started at or after this RFC 3339 instant"),
        ("until" = Option<String>, Query, description = "only instances started at or before this RFC 3339 instant (ms precision)")),
    responses((status = 200, body = CountsBody), (status = 400, body = ErrorBody)))]
pub async fn counts(
    State(state): State<Arc<AppState>>,
    TenantCaller(tenant): TenantCaller,
    ApiQuery(q): ApiQuery<CountsQuery>,
) -> ApiResult<Json<CountsBody>> {
    if let Some(p) = &q.process {
        check_id("process", p)?;
    }
    let within = started_within(q.since.as_deref(), q.until.as_deref())?;
    let rows = state
        .runtime
        .store()
        .instance_counts(
            &tenant,
            q.process.as_deref(),
            within.from.as_deref(),
            within.before.as_deref(),
        )
        .await?;
    use crate::engine::InstanceState as S;
    let mut counts: BTreeMap<String, i64> = [
        S::Running,
        S::Waiting,
        S::Completed,
        S::Terminated,
        S::Failed,
        S::Compensated,
    ]
    .iter()
    .map(|s| (s.as_str().to_string(), 0))
    .collect();
    for (s, n) in rows {
        counts.insert(s, n);
    }
    let total = counts.values().sum();
    let retried = match counts.get("FAILED").copied().unwrap_or(0) {
        0 => 0,
        _ => {
            state
                .runtime
                .store()
                .retried_failed_count(
                    &tenant,
                    q.process.as_deref(),
                    within.from.as_deref(),
                    within.before.as_deref(),
                )
                .await?
        }
    };
    Ok(Json(CountsBody {
        counts,
        total,
        retried,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempt: i64, outcome: &str, ended_ms: i64) -> AttemptBody {
        AttemptBody {
            task: "Charge".into(),
            token: 1,
            attempt,
            started_at: from_millis(0),
            ended_at: from_millis(ended_ms),
            duration_ms: ended_ms,
            outcome: outcome.into(),
            code: None,
            class: None,
            message: None,
            worker: None,
            retries_left: None,
            stderr: None,
            calls: None,
            logs: Vec::new(),
            input: None,
            output: None,
            item: None,
        }
    }

    fn failure(call_attempt: i64, at: i64, message: &str) -> WorkerFailureRecord {
        WorkerFailureRecord {
            request_id: format!("i.{call_attempt}"),
            token: 1,
            node: "Charge".into(),
            call_attempt,
            at,
            worker: "w1".into(),
            message: message.into(),
            retries_left: 2,
        }
    }

    fn shape(rows: &[AttemptBody]) -> Vec<(i64, &str, Option<&str>)> {
        rows.iter()
            .map(|a| (a.attempt, a.outcome.as_str(), a.message.as_deref()))
            .collect()
    }

    #[test]
    fn worker_failures_go_in_time_before_the_answer_of_their_call_attempt() {
        // Call attempt 1 timed out at 10; attempt 2's worker failed at 10
        // (the same instant) and at 15, then its answer came at 15.
        let rows = vec![row(1, "failed", 10), row(2, "completed", 15)];
        let merged = with_worker_failures(
            rows,
            vec![failure(2, 10, "first"), failure(2, 15, "second")],
        );
        assert_eq!(
            shape(&merged),
            vec![
                (1, "failed", None),
                (2, WORKER_FAILED, Some("first")),
                (2, WORKER_FAILED, Some("second")),
                (2, "completed", None),
            ]
        );
        // No answer yet (an incident): after everything that ended before.
        let merged = with_worker_failures(vec![row(1, "failed", 10)], vec![failure(2, 12, "x")]);
        assert_eq!(
            shape(&merged),
            vec![(1, "failed", None), (2, WORKER_FAILED, Some("x"))]
        );
        assert_eq!(
            merged[1].code.as_deref(),
            Some("SUTRA.RUNTIME.EXTERNAL_TASK.FAILED")
        );
        assert_eq!(merged[1].class.as_deref(), Some("transient"));
    }
}
