//! What `sutra run`, `sutra inspect` and the API show of an instance.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::Snapshot;
use crate::store::{AttemptRow, Store};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseView {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorView {
    pub code: String,
    pub message: String,
    pub cause: Option<CauseView>,
    /// Compensators that failed during the unwind this error began.
    #[serde(rename = "compensationFailures", skip_serializing_if = "Vec::is_empty")]
    pub compensation_failures: Vec<crate::engine::CompensationFailure>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub task: String,
    pub attempt: i64,
    pub at: DateTime<Utc>,
    pub outcome: String,
    pub code: Option<String>,
}

/// The shape of `sutra run` / `sutra inspect` (and the API's instance view).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub instance: String,
    pub process: String,
    pub deployment: String,
    pub state: String,
    pub variables: Map<String, Value>,
    pub error: Option<ErrorView>,
    pub attempts: Vec<AttemptView>,
    /// Each reached node's state (READY, RUNNING, SUCCEEDED, FAILED, SKIPPED,
    /// CANCELLED, COMPENSATED), by node id.
    pub nodes: std::collections::BTreeMap<String, String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

/// The history route's answer: the journal, or an explanatory empty shape
/// when the audit journal is off (never a not-found).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryView {
    pub instance: String,
    pub audit: bool,
    pub entries: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        task: a.node.clone(),
        attempt: a.attempt,
        at: at(a.started_at),
        outcome: a.outcome.clone(),
        code: a.code.clone(),
    }
}

impl<S: Store> Runtime<S> {
    /// Inspect an instance (a retained terminal one answers too).
    pub async fn inspect(&self, id: &str) -> RuntimeResult<InstanceView> {
        let rec = self.inner.store.load_instance(id).await?.ok_or_else(|| {
            RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
        })?;
        let snap = Snapshot::from_json(&rec.snapshot)
            .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
        let attempts = self.inner.store.attempts(id).await?;
        Ok(InstanceView {
            instance: rec.id,
            process: rec.process_id,
            deployment: rec.deployment_id,
            state: rec.state,
            variables: snap.variables,
            error: snap.error.map(|e| ErrorView {
                code: e.code,
                message: e.message,
                cause: e.cause.map(|c| CauseView {
                    code: c.code,
                    message: c.message,
                }),
                compensation_failures: e.compensation_failures,
            }),
            attempts: attempts.iter().map(attempt_view).collect(),
            nodes: snap
                .node_states
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().to_string()))
                .collect(),
            started_at: at(rec.started_at),
            ended_at: rec.ended_at.map(at),
            retry_of: rec.retry_of,
        })
    }

    /// The instance's history (the audit journal).
    pub async fn history(&self, id: &str) -> RuntimeResult<HistoryView> {
        if self.inner.store.load_instance(id).await?.is_none() {
            return Err(RuntimeError::new(
                Code::InstanceNotFound,
                format!("no instance {id}"),
            ));
        }
        if !self.inner.config.audit_sql {
            return Ok(HistoryView {
                instance: id.to_string(),
                audit: false,
                entries: vec![],
                note: Some(
                    "the audit journal is off (sutra.audit.sql = false): no history is kept; inspect still answers".into(),
                ),
            });
        }
        let rows = self.inner.store.journal(id).await?;
        let entries = rows
            .into_iter()
            .map(|r| {
                serde_json::json!({
                    "seq": r.seq,
                    "at": at(r.at),
                    "kind": r.kind,
                    "node": r.node,
                    "data": serde_json::from_str::<Value>(&r.data).unwrap_or(Value::Null),
                })
            })
            .collect();
        Ok(HistoryView {
            instance: id.to_string(),
            audit: true,
            entries,
            note: None,
        })
    }
}
