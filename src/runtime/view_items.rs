//! The per-item (per-branch) view of an instance's fan-outs (a Map, a
//! Parallel, a BPMN multi-instance activity), read from its snapshot: each
//! item's index, state and the tokens inside it.
//!
//! What the snapshot holds, and so what [`items`] shows: a fan-out's items
//! while its fan-out token exists (running, and kept in a FAILED instance
//! for a retry from the failure). An item that ended has no token left, and
//! once the fan-out itself ended nothing per item is left in the snapshot.
//! What outlives both is on the attempt rows (migration 0025): each attempt
//! keeps the item it ran in ([`ItemRef`]: the fan-out node and the index,
//! `engine::AttemptRecord::item`), so the attempts name their item after it
//! ended, and the console rebuilds the per-item view of an ended fan-out
//! from them (one row per item that ran an attempt; an item that ran none,
//! such as a Pass inside a Map, is not listed then).

use crate::engine::snapshot::TaskPhase;
use crate::engine::{Snapshot, TokenStatus};
use serde::Serialize;

/// One item (or branch) of a fan-out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemView {
    /// The fan-out node (its IR id: a Map, a Parallel, `A#body` for a BPMN
    /// activity `A` with loop characteristics).
    pub node: String,
    /// Its index (0-based: `$$.Map.Item.Index`, a BPMN `loopCounter` − 1).
    pub index: u32,
    /// `pending` (not started), `running`, `waiting` (a backoff, a timer, a
    /// message, a child, a channel call), `failed` (a task inside failed
    /// and the instance with it) or `ended` (its result is in).
    pub state: String,
    /// The tokens inside it now (an attempt's `token`); none once it ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<u64>,
}

/// The fan-out item an attempt ran in, as the API names it (`item` of an
/// attempt: `{node, index}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ItemRef {
    /// The fan-out node (its IR id: a Map, a Parallel, `A#body` for a BPMN
    /// activity `A` with loop characteristics).
    pub node: String,
    /// The item's index, 0-based (`$$.Map.Item.Index`, a BPMN
    /// `loopCounter` − 1, a Parallel's branch in document order).
    pub index: u32,
}

impl ItemRef {
    /// The item stored on an attempt row, if it has one (migration 0025).
    pub(crate) fn of(a: &crate::store::AttemptRow) -> Option<ItemRef> {
        let node = a.item_node.clone()?;
        let index = u32::try_from(a.item_index?).ok()?;
        Some(ItemRef { node, index })
    }
}

/// The most items a view lists (a Map over 100,000 items would make every
/// poll of the instance page a large answer): the first ones by fan-out
/// then index.
const ITEMS_SHOWN: usize = 1000;

/// Every item of every fan-out `snap` holds, by fan-out then index (at most
/// [`ITEMS_SHOWN`]).
pub(crate) fn items(snap: &Snapshot, failed: bool) -> Vec<ItemView> {
    let mut out = Vec::new();
    for fan in &snap.tokens {
        let TokenStatus::Fanout(st) = &fan.status else {
            continue;
        };
        let branches: Vec<(u32, u64)> = snap
            .tokens
            .iter()
            .filter(|t| t.scope == Some(fan.id))
            .filter_map(|t| match t.status {
                TokenStatus::Branch { slot, .. } => Some((slot, t.id)),
                _ => None,
            })
            .collect();
        for (index, result) in st.results.iter().enumerate() {
            if out.len() >= ITEMS_SHOWN {
                return out;
            }
            let index = index as u32;
            let branch = branches.iter().find(|(s, _)| *s == index).map(|b| b.1);
            let (state, tokens) = match branch {
                Some(b) => {
                    let inside = inside(snap, b);
                    (branch_state(snap, &inside, failed), inside)
                }
                None if result.is_some() => ("ended".to_string(), Vec::new()),
                None => ("pending".to_string(), Vec::new()),
            };
            out.push(ItemView {
                node: fan.node.clone(),
                index,
                state,
                tokens,
            });
        }
    }
    out
}

/// The tokens whose scope chain reaches `branch` (and the branch itself).
fn inside(snap: &Snapshot, branch: u64) -> Vec<u64> {
    let within = |mut t: Option<u64>| {
        for _ in 0..64 {
            match t {
                Some(s) if s == branch => return true,
                Some(s) => t = snap.token(s).and_then(|x| x.scope),
                None => return false,
            }
        }
        false
    };
    snap.tokens
        .iter()
        .filter(|t| t.id == branch || within(t.scope))
        .map(|t| t.id)
        .collect()
}

fn branch_state(snap: &Snapshot, inside: &[u64], failed: bool) -> String {
    let tokens: Vec<_> = inside.iter().filter_map(|&t| snap.token(t)).collect();
    let at_failed = tokens.iter().any(|t| {
        snap.node_states.get(&t.node).map(|s| s.as_str()) == Some("FAILED")
            && matches!(t.status, TokenStatus::Task(_) | TokenStatus::Ready)
    });
    if failed && at_failed {
        return "failed".into();
    }
    let waiting = tokens.iter().any(|t| match &t.status {
        TokenStatus::Waiting { .. } => true,
        TokenStatus::Task(s) => !matches!(s.phase, TaskPhase::Running { .. }),
        _ => false,
    });
    if waiting { "waiting" } else { "running" }.into()
}
