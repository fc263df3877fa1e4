//! What a start answers (issue 33 items 5 and 9): the instance once every
//! token waits — or, when the client asks, once its first step is committed —
//! and, when the instance ended and was deleted before the answer
//! (retention `PT0S`), its final state instead of a not-found.
//!
//! Invariants:
//! - only the starts waiting for an answer are watched: a deletion no start
//!   awaits keeps nothing (the memory held is bounded by the starts in flight);
//! - an instance deleted at its end is answered from its final snapshot (its
//!   state, variables, node states, error), never from a guess;
//! - answering at commit changes nothing of what runs: the rest of the start
//!   (its attempts, children, sends) goes on in a task of its own.

use super::view::{ErrorView, InstanceView};
use super::{Runtime, RuntimeResult, StartRequest};
use crate::engine::Snapshot;
use crate::store::{EndedInstance, Store};
use std::collections::HashMap;
use std::sync::Mutex;

/// The note of an instance answered after its deletion.
pub const DELETED_NOTE: &str = "deleted at completion (sutra.instance.retention = PT0S)";

/// The starts awaiting their answer: instance id → its final snapshot once
/// it was deleted at its end.
#[derive(Default)]
pub(crate) struct Answers {
    watched: Mutex<HashMap<String, Option<Box<Snapshot>>>>,
}

impl Answers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<Box<Snapshot>>>> {
        match self.watched.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        }
    }

    /// A committed step deleted instance `id` at its end (`snapshot` its last state).
    pub(crate) fn deleted(&self, id: &str, snapshot: &Snapshot) {
        if let Some(slot) = self.lock().get_mut(id) {
            *slot = Some(Box::new(snapshot.clone()));
        }
    }
}

/// Stops watching an id when the start's answer is made (or the start failed).
struct Watch<'a> {
    answers: &'a Answers,
    id: String,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.answers.lock().remove(&self.id);
    }
}

/// A start's answer.
#[derive(Debug)]
pub struct Answered {
    /// The instance (an earlier one when the idempotency key replayed it).
    pub id: String,
    /// The instance ended and was deleted before the answer: its final view.
    pub deleted: Option<InstanceView>,
}

/// The view of an instance deleted at its end, from its last snapshot.
pub fn ended_view(snap: Snapshot) -> InstanceView {
    InstanceView {
        instance: snap.instance_id,
        process: snap.process_id,
        deployment: snap.deployment_id,
        state: snap.state.as_str().to_string(),
        variables: snap.variables,
        error: snap.error.map(ErrorView::from),
        attempts: Vec::new(),
        waits: Vec::new(),
        nodes: snap
            .node_states
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().to_string()))
            .collect(),
        started_at: snap.started_at,
        ended_at: snap.ended_at,
        closed_at: None,
        retry_of: None,
        business_key: None,
        parent: snap.parent.map(|p| p.instance),
        note: Some(DELETED_NOTE.to_string()),
        retried_by: Vec::new(),
        children: Vec::new(),
        items: Vec::new(),
    }
}

/// The view a replayed idempotency key answers when its instance was
/// deleted at its end: what it ended as (variables and attempts are gone).
pub fn kept_key_view(id: &str, ended: &EndedInstance) -> InstanceView {
    let at = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    InstanceView {
        instance: id.to_string(),
        process: ended.process_id.clone(),
        deployment: ended.deployment_id.clone(),
        state: ended.state.clone(),
        variables: Default::default(),
        error: None,
        attempts: Vec::new(),
        waits: Vec::new(),
        nodes: Default::default(),
        started_at: at(ended.started_at),
        ended_at: ended.ended_at.map(at),
        closed_at: None,
        retry_of: None,
        business_key: None,
        parent: None,
        note: Some(format!(
            "{DELETED_NOTE}: the answer its Idempotency-Key keeps (without variables)"
        )),
        retried_by: Vec::new(),
        children: Vec::new(),
        items: Vec::new(),
    }
}

impl<S: Store> Runtime<S> {
    /// Start an instance and answer as the API does: once every token waits
    /// (`at_commit` false) or once its first step is committed (`at_commit`
    /// true; the rest runs on). An instance deleted at its end before the
    /// answer comes back with its final view.
    pub async fn start_answered(
        &self,
        mut req: StartRequest,
        at_commit: bool,
    ) -> RuntimeResult<Answered> {
        let now = self.inner.clock.now().timestamp_millis();
        let id = req.id.clone().unwrap_or_else(|| super::new_id(now));
        req.id = Some(id.clone());
        req.answer_at_commit = at_commit;
        let answers = &self.inner.answers;
        answers.lock().insert(id.clone(), None);
        let watch = Watch {
            answers,
            id: id.clone(),
        };
        let started = self.start(req).await?;
        let deleted = match started == id {
            true => answers.lock().get_mut(&id).and_then(Option::take),
            false => None,
        };
        drop(watch);
        Ok(Answered {
            id: started,
            deleted: deleted.map(|s| ended_view(*s)),
        })
    }
}
