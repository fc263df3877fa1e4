//! Child instances (process calls) as the store keeps them: created in the
//! transaction of their parent's step ([`super::StepWrite::children`]),
//! linked to the parent's child park (`instances.parent_id`,
//! `parent_park`), and ending by writing their outcome on that park in the
//! transaction of their own final step ([`super::StepWrite::wake_parent`]).
//!
//! Invariants (identical on both backends, on every write path: the sqlx
//! step writes in `queries_steps.rs`, the SQLite writer thread):
//! - a child row exists iff the parent's step that asked for it committed:
//!   never lost, never doubled (its id is derived from the parent and the
//!   park, a primary key);
//! - a child's end and its parent's wake-up commit together: the parent's
//!   child park gets the outcome (`parks.payload`) and falls due at once,
//!   so a restart in between still wakes the parent (any poller claims it);
//!   a park that is gone (the parent stopped waiting) is left alone;
//! - a live child whose parent's park is gone is an orphan
//!   (`Store::orphaned_children`): the runtime cancels it.

use super::queries::LIVE;
use super::{NewInstance, ParkClaim, StepWrite};
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// A child instance created with a step: its row, its first step, and the
/// park of its parent that awaits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewChild {
    pub instance: NewInstance,
    pub parent_id: String,
    pub parent_park: i64,
    /// The child's first step (its own `children` are listed after it in
    /// the parent's step, never nested).
    pub step: StepWrite,
}

/// A child's end, written on its parent's child park.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEnd {
    pub parent_id: String,
    pub park_seq: i64,
    /// The child's outcome (`engine::ChildOutcome`), JSON.
    pub payload: String,
    /// When the park falls due (the child's end).
    pub due_at: i64,
    /// Held by the runtime that delivers the end itself right after the
    /// commit; when it lapses, any poller delivers it from the payload.
    pub claim: Option<ParkClaim>,
}

/// `$1` parent id, `$2` parent park, `$3` child id.
pub(super) const SET_PARENT: &str =
    "UPDATE instances SET parent_id = $1, parent_park = $2 WHERE id = $3";

/// `$1` due_at, `$2` payload, `$3` claimed_by, `$4` claimed_until, `$5`
/// parent id, `$6` park seq: only a child park that still exists.
pub(super) const WAKE_PARENT: &str = "UPDATE parks SET due_at = $1, payload = $2, \
     claimed_by = $3, claimed_until = $4 \
     WHERE instance_id = $5 AND seq = $6 AND kind = 'child'";

/// `$1` instance id, `$2` seq → the outcome a child wrote on that park.
pub(super) const CHILD_OUTCOME: &str =
    "SELECT payload FROM parks WHERE instance_id = $1 AND seq = $2";

/// `$1` limit → live children whose parent's park is gone, by id. It reads
/// `instances_live_children` (migration 0009: child flows only), never the
/// live instances (a million parked ones would be read at every boot).
pub(super) static ORPHANED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT c.id FROM instances c \
         WHERE c.parent_id IS NOT NULL AND c.state IN ({LIVE}) \
           AND NOT EXISTS (SELECT 1 FROM parks p \
                           WHERE p.instance_id = c.parent_id AND p.seq = c.parent_park) \
         ORDER BY c.id LIMIT $1"
    )
});

/// The claim columns of a wake-up: a claim never lapses before its park is due.
pub(super) fn wake_claim(w: &ChildEnd) -> (Option<&str>, Option<i64>) {
    match &w.claim {
        Some(c) => (Some(c.owner.as_str()), Some(c.until.max(w.due_at))),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::super::SqliteStore;

    /// SQLite's planner (no statistics) took the state index and walked
    /// every live instance; the pass must read the children's index only.
    #[tokio::test]
    async fn the_orphan_pass_reads_only_the_index_of_live_children_on_sqlite() {
        let store = SqliteStore::open("sqlite::memory:").await.unwrap();
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {}", *super::ORPHANED))
                .bind(256_i64)
                .fetch_all(&store.read)
                .await
                .unwrap();
        let outer: Vec<&str> = plan
            .iter()
            .filter(|r| r.3.contains(" c "))
            .map(|r| r.3.as_str())
            .collect();
        assert!(
            outer.len() == 1 && outer[0].contains("instances_live_children"),
            "{plan:?}"
        );
        store.close().await;
    }
}
