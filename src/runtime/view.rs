//! What `sutra run`, `sutra inspect` and the API show of an instance.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::snapshot::TaskPhase;
use crate::engine::{InstanceState, ParkKind, Snapshot, TokenStatus};
use crate::model::{NodeKind, Process, TaskImpl};
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
    /// The node where it failed (the console names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub cause: Option<CauseView>,
    /// Compensators that failed during the unwind this error began.
    #[serde(rename = "compensationFailures", skip_serializing_if = "Vec::is_empty")]
    pub compensation_failures: Vec<crate::engine::CompensationFailure>,
}

impl From<crate::engine::snapshot::InstanceError> for ErrorView {
    fn from(e: crate::engine::snapshot::InstanceError) -> Self {
        ErrorView {
            code: e.code,
            message: e.message,
            node: e.node,
            cause: e.cause.map(|c| CauseView {
                code: c.code,
                message: c.message,
            }),
            compensation_failures: e.compensation_failures,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub task: String,
    pub attempt: i64,
    pub at: DateTime<Utc>,
    pub outcome: String,
    pub code: Option<String>,
    /// The error class of a failure (a guest's own class for its own code),
    /// as the attempts route gives it (`AttemptRow::shown_class`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Its outbound HTTP calls and denials (a task with an egress grant), as
    /// the attempts route gives them: no query, no header, no body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<crate::egress::CallRecord>,
    /// The fan-out item it ran in (a Map item, a Parallel branch, a
    /// multi-instance iteration): absent outside any fan-out and for
    /// attempts recorded before items were kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<super::view_items::ItemRef>,
}

/// One thing an instance waits for: a park of its snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitView {
    /// `message`, `event` (a named event of this instance: `resume` says
    /// how to send it), `timer`, `retry` (a backoff before `attempt`), `attempt`
    /// (an attempt in flight, re-run if its runner is lost by `due`),
    /// `channel` (a channel call awaiting its answer, timing out at `due`),
    /// or `child` (a process call awaiting its child flow).
    pub kind: String,
    /// The node it waits at (the task, the catch event or the boundary event).
    pub node: String,
    /// When it falls due; none for a message.
    pub due: Option<DateTime<Utc>>,
    /// The message name (message waits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The event name (event waits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The command that resumes an event wait (`sutra resume <instance> <event>`;
    /// the API route is `POST /v1/instances/{id}/events/{name}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// The correlation key a message must carry (message waits that have one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_key: Option<String>,
    /// The attempt that runs when it falls due (retry) or is in flight (attempt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The child instance a `child` wait awaits (a process call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
    /// The channel a `channel` wait's call went to (`channel:<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The request of a `channel` wait's current call attempt (its
    /// idempotency key on the wire; the external task's id on a pull channel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
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
    /// What it waits for, earliest due first (message waits last); empty once it ended.
    pub waits: Vec<WaitView>,
    /// Each reached node's state (READY, RUNNING, SUCCEEDED, FAILED, SKIPPED,
    /// CANCELLED, COMPENSATED), by node id.
    pub nodes: std::collections::BTreeMap<String, String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// When an operator closed this FAILED instance (`sutra close`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The business key it was started with (searchable: `businessKey=`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub business_key: Option<String>,
    /// The instance whose process call started this one (a child flow).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Why the view is not the stored instance: a start's answer for an
    /// instance deleted at its end (retention `PT0S`), or a replayed
    /// idempotency key whose instance is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The instances retried from this one, oldest first (listed for a
    /// FAILED, TERMINATED or COMPENSATED instance: a COMPLETED one's view,
    /// the answer of most starts, stays one read).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retried_by: Vec<String>,
    /// The child instances its process calls started (live or ended, while
    /// they are kept), oldest first, each with the call node that started it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
    /// Each item (branch) of the fan-outs it is in (a Map, a Parallel, a
    /// multi-instance activity): index, state, the tokens inside
    /// (`view_items`); only while the fan-out's token is kept (after it,
    /// each attempt's `item` says which item it ran in).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<super::view_items::ItemView>,
}

/// A child instance a process call of the viewed instance started.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    pub instance: String,
    /// The call node that started it: the node of its live `child` wait,
    /// else the one call node of the parent's process that calls its
    /// process; none when several call it and the wait is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub process: String,
    pub state: String,
}

/// The most children a view lists.
const CHILDREN_SHOWN: i64 = 200;

/// What a view reads of a child's snapshot: the park it answers.
#[derive(serde::Deserialize)]
struct ChildPeek {
    parent: Option<ParentPeek>,
}

#[derive(serde::Deserialize)]
struct ParentPeek {
    park: u64,
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
        class: a.shown_class(),
        calls: a
            .calls
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok()),
        item: super::view_items::ItemRef::of(a),
    }
}

/// The channel the task `node` of `process` calls, if it is a channel call.
fn channel_of(process: Option<&Process>, node: &str) -> Option<String> {
    match &process?.find(node)?.kind {
        NodeKind::ServiceTask(t) => match &t.implementation {
            TaskImpl::Channel(name) => Some(name.clone()),
            TaskImpl::Registered(_) | TaskImpl::Http(_) => None,
        },
        _ => None,
    }
}

/// `word` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@%+=,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The pending waits of a snapshot, earliest due first, message waits last;
/// `process` (the instance's) names the channel of a channel wait.
fn waits(snap: &Snapshot, process: Option<&Process>) -> Vec<WaitView> {
    // The attempt a task's own park (attempt or retry) stands for.
    let attempt_of = |seq: u64| {
        snap.tokens.iter().find_map(|t| match &t.status {
            TokenStatus::Task(task) => match task.phase {
                TaskPhase::Running { park }
                | TaskPhase::Backoff { park }
                | TaskPhase::Child { park, .. }
                    if park == seq =>
                {
                    Some(task.attempt)
                }
                _ => None,
            },
            _ => None,
        })
    };
    // The request a channel park's call attempt sent.
    let request_of = |seq: u64| {
        snap.tokens.iter().find_map(|t| match &t.status {
            TokenStatus::Task(task) => match &task.phase {
                TaskPhase::Calling { park, request } if *park == seq => Some(request.clone()),
                _ => None,
            },
            _ => None,
        })
    };
    let mut waits: Vec<WaitView> = snap
        .parks
        .iter()
        .map(|(seq, p)| WaitView {
            kind: match &p.message {
                Some(m) if m.event => "event".to_string(),
                _ => p.kind.as_str().to_string(),
            },
            node: p.node.clone(),
            due: p.due,
            message: p
                .message
                .as_ref()
                .filter(|m| !m.event)
                .map(|m| m.name.clone()),
            event: p
                .message
                .as_ref()
                .filter(|m| m.event)
                .map(|m| m.name.clone()),
            resume: p.message.as_ref().filter(|m| m.event).map(|m| {
                format!(
                    "sutra resume {} {}",
                    shell_word(&snap.instance_id),
                    shell_word(&m.name)
                )
            }),
            correlation_key: p.message.as_ref().and_then(|m| m.key.clone()),
            attempt: attempt_of(*seq),
            child: (p.kind == ParkKind::Child)
                .then(|| crate::engine::child_id(&snap.instance_id, *seq)),
            channel: (p.kind == ParkKind::Channel)
                .then(|| channel_of(process, &p.node))
                .flatten(),
            request: (p.kind == ParkKind::Channel)
                .then(|| request_of(*seq))
                .flatten(),
        })
        .collect();
    waits.sort_by_key(|w| (w.due.is_none(), w.due));
    waits
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
        // A channel wait names its channel and a call's children their
        // call nodes: the process is read only for a channel wait, or when
        // a call may have started a child (a live child wait, or an attempt
        // row: a call's attempt is written when its child ends).
        let calling = snap.parks.values().any(|p| p.kind == ParkKind::Channel);
        let may_call =
            !attempts.is_empty() || snap.parks.values().any(|p| p.kind == ParkKind::Child);
        let process = match calling || may_call {
            true => self.process_of(&rec.deployment_id).await?,
            false => None,
        };
        let waits = waits(&snap, process.as_deref());
        let children = match process.as_deref() {
            Some(p) if may_call => self.children(&rec, &snap, p, &waits).await?,
            _ => Vec::new(),
        };
        let retried_by = match snap.state {
            InstanceState::Failed | InstanceState::Terminated | InstanceState::Compensated => {
                self.inner.store.retries_of(id).await?
            }
            _ => Vec::new(),
        };
        let items = super::view_items::items(&snap, snap.state == InstanceState::Failed);
        Ok(InstanceView {
            instance: rec.id,
            process: rec.process_id,
            deployment: rec.deployment_id,
            state: rec.state,
            variables: snap.variables,
            error: snap.error.map(ErrorView::from),
            attempts: attempts.iter().map(attempt_view).collect(),
            waits,
            nodes: snap
                .node_states
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().to_string()))
                .collect(),
            started_at: at(rec.started_at),
            ended_at: rec.ended_at.map(at),
            closed_at: rec.closed_at.map(at),
            retry_of: rec.retry_of,
            business_key: rec.business_key,
            parent: snap.parent.map(|p| p.instance),
            note: None,
            retried_by,
            children,
            items,
        })
    }

    /// The children of `rec` (a process call's child is `{parent}.{park}`:
    /// `engine::child_id`), read as one id range of the instance listing —
    /// only when its process calls another. A child whose id was too long
    /// (the hashed form) is found only through its live wait.
    async fn children(
        &self,
        rec: &crate::store::InstanceRecord,
        snap: &Snapshot,
        process: &Process,
        waits: &[WaitView],
    ) -> RuntimeResult<Vec<ChildView>> {
        let calls: Vec<(&str, &str)> = process
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::CallProcess { process, .. } => Some((n.id.as_str(), process.as_str())),
                _ => None,
            })
            .collect();
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        // The ids after `{id}.`, oldest first: its descendants come first
        // (no `before` bound: under a PostgreSQL database's own collation,
        // which may weigh punctuation last, '/' need not follow '.'; the
        // prefix is checked below instead).
        let filter = crate::store::InstanceFilter {
            tenant: Some(rec.tenant.clone()),
            after_id: Some(format!("{}.", rec.id)),
            limit: CHILDREN_SHOWN,
            ..Default::default()
        };
        let listed = self.inner.store.list_instances(&filter).await?;
        let prefix = format!("{}.", rec.id);
        let waiting_at = |child: &str| {
            waits
                .iter()
                .find(|w| w.child.as_deref() == Some(child))
                .map(|w| w.node.clone())
        };
        let mut out: Vec<ChildView> = Vec::new();
        for c in listed {
            let Some(rest) = c.id.strip_prefix(&prefix) else {
                continue; // another instance
            };
            if rest.is_empty() || !rest.chars().all(|ch| ch.is_ascii_digit()) {
                continue; // a grandchild
            }
            let park = serde_json::from_str::<ChildPeek>(&c.snapshot)
                .ok()
                .and_then(|p| p.parent)
                .map(|p| p.park);
            if park.map(|k| k.to_string()).as_deref() != Some(rest) {
                continue;
            }
            let mut callers = calls.iter().filter(|(node, called)| {
                *called == c.process_id && snap.node_states.contains_key(*node)
            });
            let node = waiting_at(&c.id).or_else(|| match (callers.next(), callers.next()) {
                (Some((node, _)), None) => Some(node.to_string()),
                _ => None,
            });
            out.push(ChildView {
                instance: c.id,
                node,
                process: c.process_id,
                state: c.state,
            });
        }
        // Oldest first: by park (`{id}.10` follows `{id}.9`).
        out.sort_by_key(|c| {
            c.instance[prefix.len()..]
                .parse::<u64>()
                .unwrap_or(u64::MAX)
        });
        // A live child with a hashed id (a very long parent id).
        for w in waits.iter().filter(|w| w.child.is_some()) {
            let child = w.child.clone().unwrap_or_default();
            if !out.iter().any(|c| c.instance == child) {
                if let Some(c) = self.inner.store.load_instance(&child).await? {
                    out.push(ChildView {
                        instance: c.id,
                        node: Some(w.node.clone()),
                        process: c.process_id,
                        state: c.state,
                    });
                }
            }
        }
        Ok(out)
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
