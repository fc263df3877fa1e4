//! The API's request and answer bodies (JSON, camelCase). Requests refuse
//! unknown fields; answers are built from store records here, in one place.

use crate::store::tenancy::{ScheduleEvent, ScheduleRecord, TenantLimits, TenantRecord};
use crate::store::{DeploymentRecord, InstanceRecord};
use crate::time::from_millis;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

fn at(ms: i64) -> DateTime<Utc> {
    from_millis(ms)
}

/// The error shape of every non-2xx answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code, e.g. `SUTRA.TENANT.QUOTA_EXCEEDED`.
    pub code: String,
    pub message: String,
    /// Extra structure (e.g. `diagnostics`, `module`), or null.
    #[schema(value_type = Object)]
    pub details: Value,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentBody {
    pub id: String,
    pub process: String,
    pub version: i64,
    /// ACTIVE, DRAINING or RETIRED.
    pub state: String,
    pub dialect: String,
    /// Registered task name → module digest (sha256).
    pub modules: BTreeMap<String, String>,
    /// The modules deployed reusable (warm instances): name →
    /// `{"max_reuses", "memory_ceiling_bytes"}`; absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub reusable: BTreeMap<String, crate::store::ModuleReuse>,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl DeploymentBody {
    pub fn of(d: &DeploymentRecord, with_source: bool) -> Self {
        DeploymentBody {
            id: d.id.clone(),
            process: d.process_id.clone(),
            version: d.version,
            state: d.state.as_str().to_string(),
            dialect: d.dialect.clone(),
            modules: d.modules.clone(),
            reusable: d.reusable.clone(),
            created_at: at(d.created_at),
            source: with_source.then(|| d.source.clone()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeploymentList {
    pub deployments: Vec<DeploymentBody>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleBody {
    pub start_node: String,
    /// ARMED, RESOLVED or EXHAUSTED.
    pub state: String,
    pub armed_at: DateTime<Utc>,
    pub last_slot: Option<i64>,
    pub next_due: Option<DateTime<Utc>>,
    pub fires: i64,
    /// Slots coalesced into fires (each spent a repeat).
    pub skipped: i64,
    /// Fires refused (e.g. over quota); each is in `events`.
    pub refused: i64,
}

impl From<&ScheduleRecord> for ScheduleBody {
    fn from(s: &ScheduleRecord) -> Self {
        ScheduleBody {
            start_node: s.start_node.clone(),
            state: s.state.clone(),
            armed_at: at(s.armed_at),
            last_slot: s.last_slot,
            next_due: s.next_due.map(at),
            fires: s.fires,
            skipped: s.skipped,
            refused: s.refused,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleEventBody {
    pub at: DateTime<Utc>,
    pub slot: Option<i64>,
    pub skipped: i64,
    /// `fired` or `refused`.
    pub outcome: String,
    pub instance: Option<String>,
    pub code: Option<String>,
    pub message: Option<String>,
}

impl From<&ScheduleEvent> for ScheduleEventBody {
    fn from(e: &ScheduleEvent) -> Self {
        ScheduleEventBody {
            at: at(e.at),
            slot: e.slot,
            skipped: e.skipped,
            outcome: e.outcome.clone(),
            instance: e.instance_id.clone(),
            code: e.code.clone(),
            message: e.message.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleBody>,
    pub events: Vec<ScheduleEventBody>,
}

/// `POST /v1/processes/{process}/instances`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The start variables: a JSON object. A States-language execution takes any JSON value
    /// as its input (an array, a string, a number, null); a BPMN or HX process refuses any
    /// other value than an object (422 `SUTRA.RUNTIME.INSTANCE.INPUT_INVALID`).
    #[serde(default, deserialize_with = "any_input")]
    #[schema(value_type = Value)]
    pub variables: Map<String, Value>,
    /// The instance's business key (1 to 256 bytes, no control characters):
    /// shown with it everywhere and searchable (`GET /v1/instances?businessKey=`).
    /// Without it, the process's own (`q:businessKey`), if it names one.
    #[serde(default, rename = "businessKey")]
    pub business_key: Option<String>,
}

/// Any JSON value as start variables (see `engine::document::start_variables`).
fn any_input<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    Value::deserialize(d).map(crate::engine::document::start_variables)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSummary {
    pub id: String,
    pub process: String,
    pub deployment: String,
    pub state: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The code the instance failed with (FAILED, COMPENSATED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The code of that error's cause (e.g. the guest's own code behind
    /// `SUTRA.RUNTIME.TASK_FAILED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause_code: Option<String>,
    /// The node whose failure ended it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_node: Option<String>,
    /// The business key it was started with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub business_key: Option<String>,
}

/// What a listing reads of a snapshot: its error and node states only.
#[derive(Deserialize)]
struct SnapshotPeek {
    #[serde(default)]
    error: Option<ErrorPeek>,
    #[serde(default)]
    node_states: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct ErrorPeek {
    code: String,
    #[serde(default)]
    cause: Option<CausePeek>,
}

#[derive(Deserialize)]
struct CausePeek {
    code: String,
}

impl From<&InstanceRecord> for InstanceSummary {
    fn from(r: &InstanceRecord) -> Self {
        let peek: Option<SnapshotPeek> = serde_json::from_str(&r.snapshot).ok();
        let (error_code, cause_code, failed_node) = match peek {
            Some(p) => (
                p.error.as_ref().map(|e| e.code.clone()),
                p.error.and_then(|e| e.cause).map(|c| c.code),
                p.node_states
                    .into_iter()
                    .find(|(_, s)| s == "FAILED")
                    .map(|(n, _)| n),
            ),
            None => (None, None, None),
        };
        InstanceSummary {
            id: r.id.clone(),
            process: r.process_id.clone(),
            deployment: r.deployment_id.clone(),
            state: r.state.clone(),
            started_at: at(r.started_at),
            ended_at: r.ended_at.map(at),
            retry_of: r.retry_of.clone(),
            error_code,
            cause_code,
            failed_node,
            business_key: r.business_key.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<InstanceSummary>,
    /// Pass as `after` for the next page; null on the last page.
    pub next: Option<String>,
}

/// `GET /v1/instances` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub state: Option<String>,
    pub process: Option<String>,
    pub after: Option<String>,
    /// RFC 3339: only instances started at or after it.
    pub since: Option<String>,
    /// RFC 3339: only instances started at or before it.
    pub until: Option<String>,
    pub limit: Option<i64>,
    /// `oldest` (the default: by start, oldest first) or `newest`; `after`
    /// continues in the same order.
    pub order: Option<String>,
    /// Only instances started with this business key.
    #[serde(rename = "businessKey")]
    pub business_key: Option<String>,
    /// Only instances whose error has this code.
    #[serde(rename = "errorCode")]
    pub error_code: Option<String>,
    /// Only instances whose failed node is this one.
    #[serde(rename = "failedNode")]
    pub failed_node: Option<String>,
}

/// `POST /v1/instances/{id}/cancel`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    pub reason: Option<String>,
}

/// `POST /v1/instances/{id}/close`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseBody {
    /// Why the operator closes it (kept in the journal; at most 1,024 bytes).
    pub reason: Option<String>,
}

/// `POST /v1/processes/{process}/instances` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartQuery {
    /// `false`: answer once the start is committed, not once every token waits.
    pub wait: Option<bool>,
}

/// `POST /v1/instances/{id}/retry` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryQuery {
    /// `full` (default) or `from-failure`.
    pub mode: Option<String>,
}

/// `POST /v1/messages`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageBody {
    pub name: String,
    pub correlation_key: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessageAnswer {
    /// The instance the message went to (or started).
    pub instance: String,
}

/// A tenant's quotas (null = unlimited).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsBody {
    pub max_instances: Option<i64>,
    pub max_module_bytes: Option<i64>,
    pub fuel: Option<i64>,
    pub deadline_ms: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// Functions one task module may define (lowers `sutra.sandbox.compile.max-functions`).
    #[serde(default)]
    pub max_module_functions: Option<i64>,
    /// CPU and wall-clock ceiling of compiling one module, in milliseconds.
    #[serde(default)]
    pub compile_ms: Option<i64>,
}

impl LimitsBody {
    /// Negative quotas are refused.
    pub fn to_limits(&self) -> Result<TenantLimits, String> {
        let l = TenantLimits {
            max_instances: self.max_instances,
            max_module_bytes: self.max_module_bytes,
            fuel: self.fuel,
            deadline_ms: self.deadline_ms,
            memory_bytes: self.memory_bytes,
            max_module_functions: self.max_module_functions,
            compile_ms: self.compile_ms,
        };
        for (k, v) in [
            ("maxInstances", l.max_instances),
            ("maxModuleBytes", l.max_module_bytes),
            ("fuel", l.fuel),
            ("deadlineMs", l.deadline_ms),
            ("memoryBytes", l.memory_bytes),
            ("maxModuleFunctions", l.max_module_functions),
            ("compileMs", l.compile_ms),
        ] {
            if v.is_some_and(|v| v < 0) {
                return Err(format!("{k} must not be negative"));
            }
        }
        Ok(l)
    }
}

impl From<&TenantLimits> for LimitsBody {
    fn from(l: &TenantLimits) -> Self {
        LimitsBody {
            max_instances: l.max_instances,
            max_module_bytes: l.max_module_bytes,
            fuel: l.fuel,
            deadline_ms: l.deadline_ms,
            memory_bytes: l.memory_bytes,
            max_module_functions: l.max_module_functions,
            compile_ms: l.compile_ms,
        }
    }
}

/// `POST /v1/admin/tenants`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenantBody {
    pub name: String,
    #[serde(default)]
    pub limits: LimitsBody,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantBody {
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub limits: LimitsBody,
    /// The new key: shown once, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The new key's id (with `key`): what `DELETE .../keys/{keyId}` revokes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The keys a rotation revoked (with `key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Vec<String>>,
}

impl TenantBody {
    pub fn of(t: &TenantRecord, key: Option<String>) -> Self {
        let key_id = key
            .as_deref()
            .and_then(crate::api::auth::key_id_of_key)
            .map(str::to_string);
        TenantBody {
            name: t.name.clone(),
            created_at: at(t.created_at),
            limits: (&t.limits).into(),
            key,
            key_id,
            revoked: None,
        }
    }
}

/// One API key of a tenant, never its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyBody {
    /// The key's public id (the 16 hex digits after `sutra_`).
    pub id: String,
    /// How the key starts: `sutra_<id>_`.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

impl ApiKeyBody {
    pub fn of(k: &crate::store::tenancy::ApiKeyRecord) -> Self {
        ApiKeyBody {
            id: k.key_id.clone(),
            prefix: crate::api::auth::key_prefix(&k.key_id),
            created_at: at(k.created_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyList {
    pub tenant: String,
    pub keys: Vec<ApiKeyBody>,
}

/// What a revocation did.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevokedBody {
    pub tenant: String,
    pub revoked: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<TenantBody>,
}

/// `POST /v1/admin/clock/advance` (only with `--manual-clock`): exactly one of `by`, `to`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdvanceBody {
    /// An ISO-8601 duration, e.g. `PT1H`.
    pub by: Option<String>,
    /// An ISO-8601 instant with offset.
    pub to: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClockBody {
    pub now: DateTime<Utc>,
}
