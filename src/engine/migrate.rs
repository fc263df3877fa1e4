//! Instance migration (000: a FAILED instance is "repairable through
//! instance migration"): move an instance's snapshot onto another
//! deployment of its process, node by node, and resume a FAILED one at its
//! failed node with a fresh budget ([`super::Event::Resume`]).
//!
//! Invariants:
//! - every node the snapshot refers to (tokens, parks, the failed node) has
//!   a counterpart of the same kind in the target (same id unless mapped),
//!   else nothing changes and the answer is
//!   `SUTRA.RUNTIME.MIGRATION.UNMAPPED_NODE`;
//! - parks keep their numbers, so the stored rows stay valid; the runtime
//!   re-pins them to the target deployment in the same transaction.

use super::machine::Machine;
use super::snapshot::TaskPhase;
use super::{EngineError, InstanceState, Snapshot, TokenStatus};
use crate::codes::Code;
use crate::model::{NodeKind, Process, StartTrigger, TaskImpl};
use serde_json::json;
use std::collections::BTreeMap;

fn unmapped(message: String) -> EngineError {
    EngineError {
        code: Code::MigrationUnmappedNode,
        message,
    }
}

/// The counterpart of `node` in `target` (mapped, else the same id), checked
/// to be of the same kind as `kind` in the source.
fn counterpart(
    source: &Process,
    target: &Process,
    map: &BTreeMap<String, String>,
    node: &str,
) -> Result<String, EngineError> {
    let to = map.get(node).cloned().unwrap_or_else(|| node.to_string());
    let Some(new) = target.find(&to) else {
        return Err(unmapped(format!(
            "node `{node}` has no counterpart `{to}` in the target version: map it to one"
        )));
    };
    if let Some(old) = source.find(node) {
        if std::mem::discriminant(&old.kind) != std::mem::discriminant(&new.kind) {
            return Err(unmapped(format!(
                "node `{node}` would become `{to}`, a node of another kind"
            )));
        }
    }
    Ok(to)
}

/// Move `snap` (of `source`) onto `target`, deployment `deployment_id`.
pub fn migrate(
    source: &Process,
    target: &Process,
    mut snap: Snapshot,
    deployment_id: &str,
    map: &BTreeMap<String, String>,
) -> Result<Snapshot, EngineError> {
    if source.id != target.id {
        return Err(EngineError {
            code: Code::MigrationTargetInvalid,
            message: format!(
                "the target runs process `{}`, the instance `{}`",
                target.id, source.id
            ),
        });
    }
    for t in &mut snap.tokens {
        let to = counterpart(source, target, map, &t.node)?;
        if let TokenStatus::Task(state) = &t.status {
            let channel = target.find(&to).is_some_and(|n| {
                matches!(&n.kind, NodeKind::ServiceTask(s) if matches!(s.implementation, TaskImpl::Channel(_)))
            });
            if matches!(state.phase, TaskPhase::Calling { .. }) && !channel {
                return Err(unmapped(format!(
                    "`{}` waits for a channel response; `{to}` is not a channel call",
                    t.node
                )));
            }
            let call = target
                .find(&to)
                .is_some_and(|n| matches!(n.kind, NodeKind::CallProcess { .. }));
            if matches!(state.phase, TaskPhase::Child { .. }) && !call {
                return Err(unmapped(format!(
                    "`{}` waits for a child flow; `{to}` is not a process call",
                    t.node
                )));
            }
        }
        t.node = to;
    }
    for p in snap.parks.values_mut() {
        p.node = counterpart(source, target, map, &p.node)?;
    }
    if snap.state == InstanceState::Failed {
        if let Some(node) = snap.error.as_ref().and_then(|e| e.node.clone()) {
            let to = counterpart(source, target, map, &node)?;
            if let Some(e) = snap.error.as_mut() {
                e.node = Some(to);
            }
        }
    }
    snap.completed = snap
        .completed
        .iter()
        .map(|n| map.get(n).cloned().unwrap_or_else(|| n.clone()))
        .collect();
    snap.deployment_id = deployment_id.to_string();
    Ok(snap)
}

impl Machine<'_> {
    /// A FAILED instance resumes at its failed node (top level), with a
    /// fresh budget: one new token, the variables as they were.
    pub(super) fn resume(&mut self) -> Result<(), EngineError> {
        let state_error = |message: String| EngineError {
            code: Code::InstanceState,
            message,
        };
        if self.snap.state != InstanceState::Failed {
            return Err(state_error(format!(
                "instance is {}: only a FAILED instance resumes",
                self.snap.state.as_str()
            )));
        }
        let node = self
            .snap
            .error
            .as_ref()
            .and_then(|e| e.node.clone())
            .ok_or_else(|| state_error("the failed instance recorded no failed node".into()))?;
        let n = self
            .process
            .find(&node)
            .filter(|n| {
                n.scope.is_none() && !matches!(n.kind, NodeKind::Start(StartTrigger::Timer(_)))
            })
            .ok_or_else(|| {
                state_error(format!(
                    "cannot resume at `{node}`: not a top-level node of the process"
                ))
            })?;
        let error = self.snap.error.take();
        self.snap.state = InstanceState::Running;
        self.snap.ended_at = None;
        journal!(
            self,
            "instance_resumed",
            Some(&node),
            json!({ "after": error.map(|e| e.code) }),
        );
        self.spawn(n.ix, None, None);
        Ok(())
    }
}
