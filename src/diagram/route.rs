//! Routing the flows of one scope through its layered grid (`layout.rs`),
//! so that no flow runs through a shape it does not connect.
//!
//! The grid: columns (one per layer, as wide as their widest node) with a
//! channel of `gap` between them that holds no shape, and below the
//! content a lane per backward flow. A flow leaves its source to the right
//! (a boundary event's from its bottom, just below its host), turns only in
//! channels, crosses a column only at the height of its own dummy slot
//! there (a forward flow over several layers has one in each column it
//! crosses), and enters its target from the left. A backward flow (a loop)
//! goes down the channel after its source to its lane, along it, and up
//! the channel before its target. Flows sharing a channel turn at
//! different offsets within it, so they do not share vertical segments.
//!
//! Compensation associations and flows between scopes keep the plain
//! routing of `layout::route`.

use super::layout::Bounds;
use crate::model::{FlowIx, FlowKind, NodeIx, NodeKind, Process};
use std::collections::BTreeMap;

/// The height of a dummy slot (a flow crossing a column).
pub const DUMMY_H: f64 = 10.0;
/// The distance between two lanes of backward flows.
const LANE: f64 = 16.0;
/// The distance between two flows turning in one channel.
const SLOT: f64 = 7.0;
/// How far below a boundary event its flow turns.
const DROP: f64 = 8.0;

/// A flow's waypoints.
pub type Waypoints = Vec<(f64, f64)>;

/// One scope's grid, relative to its content origin.
pub struct Grid {
    /// Each column's left edge and width.
    pub col_x: Vec<f64>,
    pub col_w: Vec<f64>,
    /// The channel between two columns.
    pub gap: f64,
    /// Where flows into the first column turn (left of it).
    pub left: f64,
    /// The content's bottom (boundary events included): lanes go below.
    pub bottom: f64,
    /// The layer of each member (local index).
    pub layer: Vec<usize>,
    /// (source, target) of a forward edge over several layers → the height
    /// of its dummy slot in each column between.
    pub chains: BTreeMap<(usize, usize), Vec<f64>>,
}

impl Grid {
    /// The x of the next turn in the channel after column `l` (`None`:
    /// before the first column).
    fn turn(&self, after: Option<usize>, used: &mut BTreeMap<Option<usize>, usize>) -> f64 {
        let n = used.entry(after).or_default();
        let k = *n;
        *n += 1;
        let room = (self.gap / 2.0 - 5.0).max(SLOT);
        let steps = (room / SLOT).floor().max(1.0) as usize;
        // 0, +1, -1, +2, -2, ... slots from the channel's middle, wrapping.
        let i = k % (2 * steps + 1);
        let offset = match i {
            0 => 0.0,
            i if i % 2 == 1 => SLOT * i.div_ceil(2) as f64,
            i => -SLOT * (i / 2) as f64,
        };
        match after {
            None => self.left,
            Some(l) => {
                let l = l.min(self.col_x.len().saturating_sub(1));
                self.col_x[l] + self.col_w[l] + self.gap / 2.0 + offset
            }
        }
    }
}

/// The routed flows of a scope whose members are `nodes` (`local` maps a
/// node to its member index, a boundary event to its host's), and the
/// content's size with the lanes and channels the routes use.
pub fn scope(
    p: &Process,
    nodes: &[NodeIx],
    grid: &Grid,
    rel: &[Bounds],
    local: impl Fn(NodeIx) -> Option<usize>,
) -> (Vec<(FlowIx, Waypoints)>, (f64, f64)) {
    let mut used = BTreeMap::new();
    let mut lanes = 0usize;
    let mut max_x = 0.0f64;
    let mut out = Vec::new();
    for flow in &p.flows {
        if flow.kind == FlowKind::Compensation {
            continue;
        }
        let (Some(s), Some(t)) = (local(flow.source), local(flow.target)) else {
            continue;
        };
        if !nodes.contains(&flow.target) {
            continue;
        }
        let src = rel[flow.source.0 as usize];
        let dst = rel[flow.target.0 as usize];
        let mut pts = Vec::new();
        let mut y = if matches!(p.node(flow.source).kind, NodeKind::Boundary(_)) {
            let start = (src.x + src.w / 2.0, src.y + src.h);
            pts.push(start);
            pts.push((start.0, start.1 + DROP));
            start.1 + DROP
        } else {
            let start = (src.x + src.w, src.y + src.h / 2.0);
            pts.push(start);
            start.1
        };
        let end = (dst.x, dst.y + dst.h / 2.0);
        let (ls, lt) = (grid.layer[s], grid.layer[t]);
        let chain = grid.chains.get(&(s, t));
        let forward = lt > ls && (lt == ls + 1 || chain.is_some_and(|c| c.len() == lt - ls - 1));
        if forward {
            for l in ls..lt {
                let x = grid.turn(Some(l), &mut used);
                let next = match chain {
                    Some(c) if l + 1 < lt => c[l - ls],
                    _ => end.1,
                };
                pts.push((x, y));
                pts.push((x, next));
                y = next;
            }
        } else {
            lanes += 1;
            let lane = grid.bottom + LANE * lanes as f64;
            let down = grid.turn(Some(ls), &mut used);
            let up = match lt {
                0 => grid.turn(None, &mut used),
                lt => grid.turn(Some(lt - 1), &mut used),
            };
            max_x = max_x.max(down);
            pts.extend([(down, y), (down, lane), (up, lane), (up, end.1)]);
        }
        pts.push(end);
        out.push((flow.ix, pts));
    }
    let width = match grid.col_x.last() {
        Some(x) => (x + grid.col_w.last().copied().unwrap_or(0.0)).max(max_x + SLOT),
        None => 0.0,
    };
    let height = match lanes {
        0 => grid.bottom,
        n => grid.bottom + LANE * (n as f64 + 0.5),
    };
    (out, (width, height))
}
