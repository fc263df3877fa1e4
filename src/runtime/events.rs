//! Resuming a wait on a named event (`POST /v1/instances/{id}/events/{name}`,
//! `sutra resume`): the instance's message park with that name is fired with
//! the event's data, through the ordinary engine step.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::{Event, ParkKind, Snapshot};
use crate::store::Store;
use serde_json::{Map, Value};

impl<S: Store> Runtime<S> {
    /// Fire instance `id`'s wait on event `name` with `data`. Refused with
    /// `SUTRA.RUNTIME.EVENT.NOT_AWAITED` when the instance does not wait for
    /// that event (an unknown name, a finished or running instance).
    pub async fn resume_event(
        &self,
        id: &str,
        name: &str,
        data: Map<String, Value>,
    ) -> RuntimeResult<Snapshot> {
        let rec = self.inner.store.load_instance(id).await?.ok_or_else(|| {
            RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
        })?;
        let snap = Snapshot::from_json(&rec.snapshot)
            .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
        let waiting: Vec<(u64, &str)> = snap
            .parks
            .iter()
            .filter(|(_, p)| p.kind == ParkKind::Message)
            .filter_map(|(seq, p)| p.message.as_ref().map(|m| (*seq, m.name.as_str())))
            .collect();
        let Some(&(park, _)) = waiting.iter().find(|(_, n)| *n == name) else {
            let awaited: Vec<&str> = waiting.iter().map(|(_, n)| *n).collect();
            return Err(RuntimeError::new(
                Code::EventNotAwaited,
                if awaited.is_empty() {
                    format!("instance {id} ({}) waits for no event", snap.state.as_str())
                } else {
                    format!(
                        "instance {id} does not wait for event `{name}`; it waits for: {}",
                        awaited.join(", ")
                    )
                },
            ));
        };
        self.drive(
            id.to_string(),
            Event::MessageArrived {
                park,
                variables: data,
            },
        )
        .await
    }
}
