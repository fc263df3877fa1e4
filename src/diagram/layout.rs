//! A layered (Sugiyama-style) layout of a process's IR, for the diagram
//! export: left to right, one column per layer, containers (sub-processes,
//! fan-outs) sized by their own layouts.
//!
//! Invariants:
//! - every node gets bounds and every flow at least two waypoints, whatever
//!   the graph (cycles, disconnected nodes, empty scopes): cycles are broken
//!   by a depth-first search, the edges it turns back are drawn below;
//! - deterministic: the same process lays out the same way (node order
//!   breaks every tie);
//! - a boundary event sits on its host's bottom edge and never takes a
//!   layer of its own; its outgoing flows rank as its host's.

use super::route;
use crate::model::{FlowIx, FlowKind, NodeIx, NodeKind, Process};

/// A rectangle in diagram coordinates (top-left corner, size).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bounds {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Bounds {
    fn right_mid(&self) -> (f64, f64) {
        (self.x + self.w, self.y + self.h / 2.0)
    }
    fn left_mid(&self) -> (f64, f64) {
        (self.x, self.y + self.h / 2.0)
    }
    fn bottom_mid(&self) -> (f64, f64) {
        (self.x + self.w / 2.0, self.y + self.h)
    }
    fn bottom(&self) -> f64 {
        self.y + self.h
    }
}

/// Where every node and flow of a process is drawn.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// By node index.
    pub nodes: Vec<Bounds>,
    /// By flow index.
    pub flows: Vec<Vec<(f64, f64)>>,
}

const GAP_X: f64 = 60.0;
const GAP_Y: f64 = 50.0;
const PAD: f64 = 25.0;
/// Room for a container's label above its content.
const PAD_TOP: f64 = 35.0;
const MARGIN: f64 = 40.0;
/// Iterations of the barycenter ordering.
const SWEEPS: usize = 4;

/// The size of a leaf node (a task, an event, a gateway).
fn leaf_size(node: &crate::model::Node) -> (f64, f64) {
    match &node.kind {
        NodeKind::Start(_)
        | NodeKind::End(_)
        | NodeKind::Catch(_)
        | NodeKind::Boundary(_)
        | NodeKind::Throw(_) => (36.0, 36.0),
        NodeKind::ExclusiveGateway { .. }
        | NodeKind::ParallelGateway
        | NodeKind::InclusiveGateway
        | NodeKind::EventGateway => (50.0, 50.0),
        NodeKind::Pass { .. } if super::pass_is_event(node) => (36.0, 36.0),
        NodeKind::Escalate { .. } | NodeKind::Compensate(_) => (36.0, 36.0),
        _ => (100.0, 80.0),
    }
}

fn is_container(kind: &NodeKind) -> bool {
    matches!(
        kind,
        NodeKind::SubProcess | NodeKind::Fanout(_) | NodeKind::EventSubProcess { .. }
    )
}

struct Ctx<'a> {
    p: &'a Process,
    /// scope (None = the process, Some(i) = node i) → its members, in node order.
    children: Vec<Vec<NodeIx>>,
    top: Vec<NodeIx>,
    /// Positions relative to the enclosing scope's content origin.
    rel: Vec<Bounds>,
    /// Flows routed through their scope's grid (`route.rs`): the flow, its
    /// scope (None = the process) and its waypoints relative to the
    /// scope's content origin. A flow not here is routed by [`route`].
    routed: Vec<(FlowIx, Option<NodeIx>, route::Waypoints)>,
}

/// Lay out a process.
pub fn layout(p: &Process) -> Layout {
    let n = p.nodes.len();
    let mut children = vec![Vec::new(); n];
    let mut top = Vec::new();
    for node in &p.nodes {
        match node.scope {
            Some(s) if (s.0 as usize) < n => children[s.0 as usize].push(node.ix),
            _ => top.push(node.ix),
        }
    }
    let mut cx = Ctx {
        p,
        children,
        top: top.clone(),
        rel: vec![Bounds::default(); n],
        routed: Vec::new(),
    };
    let mut visiting = vec![false; n];
    cx.lay_scope(None, &top, &mut visiting);
    // Absolute positions: a scope's content origin is its container's corner plus padding.
    let mut abs = vec![Bounds::default(); n];
    let mut stack: Vec<(NodeIx, f64, f64)> = cx.top.iter().map(|&i| (i, MARGIN, MARGIN)).collect();
    while let Some((ix, ox, oy)) = stack.pop() {
        let r = cx.rel[ix.0 as usize];
        let b = Bounds {
            x: ox + r.x,
            y: oy + r.y,
            ..r
        };
        abs[ix.0 as usize] = b;
        for &c in &cx.children[ix.0 as usize] {
            stack.push((c, b.x + PAD, b.y + PAD_TOP));
        }
    }
    let mut flows: Vec<Vec<(f64, f64)>> = p.flows.iter().map(|f| route(p, &abs, f.ix)).collect();
    for (f, scope, points) in std::mem::take(&mut cx.routed) {
        let (ox, oy) = match scope {
            None => (MARGIN, MARGIN),
            Some(c) => {
                let b = abs[c.0 as usize];
                (b.x + PAD, b.y + PAD_TOP)
            }
        };
        flows[f.0 as usize] = points.iter().map(|&(x, y)| (ox + x, oy + y)).collect();
    }
    Layout { nodes: abs, flows }
}

impl Ctx<'_> {
    /// The node a flow ranks from: a boundary event ranks as its host.
    fn anchor(&self, ix: NodeIx) -> NodeIx {
        match &self.p.node(ix).kind {
            NodeKind::Boundary(b) if (b.attached_to.0 as usize) < self.p.nodes.len() => {
                b.attached_to
            }
            _ => ix,
        }
    }

    /// Lay out the members of one scope (relative to its content origin);
    /// answers the content's size. Containers are laid out first.
    fn lay_scope(
        &mut self,
        scope: Option<NodeIx>,
        members: &[NodeIx],
        visiting: &mut [bool],
    ) -> (f64, f64) {
        let nodes: Vec<NodeIx> = members
            .iter()
            .copied()
            .filter(|&i| !matches!(self.p.node(i).kind, NodeKind::Boundary(_)))
            .collect();
        if nodes.is_empty() {
            return (0.0, 0.0);
        }
        // Sizes (containers recursively; a scope cycle cannot happen in a valid IR, but is cut).
        let mut size = vec![(0.0, 0.0); nodes.len()];
        for (k, &ix) in nodes.iter().enumerate() {
            let node = self.p.node(ix);
            size[k] = if is_container(&node.kind) && !visiting[ix.0 as usize] {
                visiting[ix.0 as usize] = true;
                let inner = self.children[ix.0 as usize].clone();
                let (w, h) = self.lay_scope(Some(ix), &inner, visiting);
                visiting[ix.0 as usize] = false;
                ((w + 2.0 * PAD).max(140.0), (h + PAD_TOP + PAD).max(100.0))
            } else {
                leaf_size(node)
            };
        }
        let local = |ix: NodeIx| nodes.iter().position(|&m| m == ix);
        // Edges between members (a boundary's flows leave from its host).
        let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        // A compensator takes its activity's layer, below it (not a step after it).
        let mut compensates: Vec<Option<usize>> = vec![None; nodes.len()];
        for f in &self.p.flows {
            let (Some(s), Some(t)) = (local(self.anchor(f.source)), local(f.target)) else {
                continue;
            };
            if f.kind == FlowKind::Compensation {
                compensates[t] = Some(s);
            } else if s != t && !out[s].contains(&t) {
                out[s].push(t);
            }
        }
        let mut has_in = vec![false; nodes.len()];
        for ts in &out {
            for &t in ts {
                has_in[t] = true;
            }
        }
        // Depth-first from the sources (then from anything left): back edges break cycles.
        let mut state = vec![0u8; nodes.len()]; // 0 new, 1 on stack, 2 done
        let mut order = Vec::with_capacity(nodes.len());
        let mut back: Vec<(usize, usize)> = Vec::new();
        let roots: Vec<usize> = (0..nodes.len())
            .filter(|&k| !has_in[k])
            .chain(0..nodes.len())
            .collect();
        for r in roots {
            if state[r] != 0 {
                continue;
            }
            let mut stack = vec![(r, 0usize)];
            state[r] = 1;
            order.push(r);
            while let Some(top) = stack.last_mut() {
                let (v, next) = *top;
                if let Some(&t) = out[v].get(next) {
                    top.1 += 1;
                    match state[t] {
                        0 => {
                            state[t] = 1;
                            order.push(t);
                            stack.push((t, 0));
                        }
                        1 => back.push((v, t)),
                        _ => {}
                    }
                } else {
                    state[v] = 2;
                    stack.pop();
                }
            }
        }
        // Longest-path layers over the forward edges (Kahn's order).
        let fwd = |s: usize, t: usize| !back.contains(&(s, t));
        let mut indeg = vec![0usize; nodes.len()];
        for (s, ts) in out.iter().enumerate() {
            for &t in ts {
                if fwd(s, t) {
                    indeg[t] += 1;
                }
            }
        }
        let mut layer = vec![0usize; nodes.len()];
        let mut queue: Vec<usize> = order.iter().copied().filter(|&k| indeg[k] == 0).collect();
        let mut qi = 0;
        while qi < queue.len() {
            let s = queue[qi];
            qi += 1;
            for &t in &out[s] {
                if fwd(s, t) {
                    layer[t] = layer[t].max(layer[s] + 1);
                    indeg[t] -= 1;
                    if indeg[t] == 0 {
                        queue.push(t);
                    }
                }
            }
        }
        for (t, s) in compensates.iter().enumerate() {
            if let (Some(s), false) = (s, has_in[t]) {
                layer[t] = layer[*s];
            }
        }
        let layers = layer.iter().max().map_or(1, |m| m + 1);
        // A forward edge over several layers passes a dummy in each layer
        // between (a slot of its own in that column), so that no flow runs
        // through a node it does not connect (route.rs).
        let real = nodes.len();
        let mut chains: std::collections::BTreeMap<(usize, usize), Vec<usize>> =
            std::collections::BTreeMap::new();
        let mut grid_out: Vec<Vec<usize>> = out.clone();
        for s in 0..real {
            for &t in &out[s] {
                if !fwd(s, t) || layer[t] <= layer[s] + 1 {
                    continue;
                }
                let mut chain = Vec::new();
                let mut prev = s;
                for l in layer[s] + 1..layer[t] {
                    let d = size.len();
                    size.push((0.0, route::DUMMY_H));
                    layer.push(l);
                    grid_out.push(Vec::new());
                    grid_out[prev].retain(|&x| x != t);
                    grid_out[prev].push(d);
                    chain.push(d);
                    prev = d;
                }
                grid_out[prev].push(t);
                chains.insert((s, t), chain);
            }
        }
        let total = size.len();
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
        let is_comp = |k: usize| k < real && compensates[k].is_some() && !has_in[k];
        for &k in order.iter().filter(|&&k| !is_comp(k)) {
            rows[layer[k]].push(k);
        }
        for k in real..total {
            rows[layer[k]].push(k);
        }
        for &k in order.iter().filter(|&&k| is_comp(k)) {
            rows[layer[k]].push(k);
        }
        // Barycenter ordering: down by predecessors, up by successors.
        let out = grid_out;
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); total];
        for (s, ts) in out.iter().enumerate() {
            for &t in ts {
                preds[t].push(s);
            }
        }
        let mut pos = vec![0.0f64; total];
        let index = |rows: &Vec<Vec<usize>>, pos: &mut Vec<f64>| {
            for row in rows {
                for (i, &k) in row.iter().enumerate() {
                    pos[k] = i as f64;
                }
            }
        };
        index(&rows, &mut pos);
        for sweep in 0..SWEEPS {
            let down = sweep % 2 == 0;
            for l in 0..layers {
                let l = if down { l } else { layers - 1 - l };
                let neighbours = if down { &preds } else { &out };
                let mut keyed: Vec<(f64, usize, usize)> = rows[l]
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| {
                        let ns: Vec<f64> = neighbours[k]
                            .iter()
                            .filter(|&&m| layer[m] != l)
                            .map(|&m| pos[m])
                            .collect();
                        let key = if ns.is_empty() {
                            pos[k]
                        } else {
                            ns.iter().sum::<f64>() / ns.len() as f64
                        };
                        (key, i, k)
                    })
                    .collect();
                keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                rows[l] = keyed.into_iter().map(|(_, _, k)| k).collect();
                index(&rows, &mut pos);
            }
        }
        // A compensator sits right below its activity, so that its flow runs
        // straight down through nothing else (two compensated activities in
        // one column: BPMN compensation).
        for row in rows.iter_mut() {
            let comps: Vec<usize> = row.iter().copied().filter(|&k| is_comp(k)).collect();
            row.retain(|&k| !is_comp(k));
            for c in comps {
                let at = compensates[c]
                    .and_then(|s| row.iter().position(|&k| k == s))
                    .map_or(row.len(), |i| i + 1);
                row.insert(at, c);
            }
        }
        // Coordinates: columns as wide as their widest node, rows centred.
        let col_w: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().map(|&k| size[k].0).fold(0.0, f64::max))
            .collect();
        let col_h: Vec<f64> = rows
            .iter()
            .map(|r| {
                r.iter().map(|&k| size[k].1).sum::<f64>()
                    + GAP_Y * (r.len().saturating_sub(1)) as f64
            })
            .collect();
        let height = col_h.iter().copied().fold(0.0, f64::max);
        let mut x = 0.0;
        let mut col_x = Vec::with_capacity(layers);
        let mut dummy_y = vec![0.0f64; total - real];
        for (l, row) in rows.iter().enumerate() {
            col_x.push(x);
            let mut y = (height - col_h[l]) / 2.0;
            for &k in row {
                let (w, h) = size[k];
                if k >= real {
                    dummy_y[k - real] = y + h / 2.0;
                } else {
                    self.rel[nodes[k].0 as usize] = Bounds {
                        x: x + (col_w[l] - w) / 2.0,
                        y,
                        w,
                        h,
                    };
                }
                y += h + GAP_Y;
            }
            x += col_w[l] + GAP_X;
        }
        // Boundary events on their host's bottom edge, right to left.
        for &ix in members {
            let node = self.p.node(ix);
            let NodeKind::Boundary(b) = &node.kind else {
                continue;
            };
            let host_ix = b.attached_to.0 as usize;
            if host_ix >= self.p.nodes.len() {
                continue;
            }
            let host = self.rel[host_ix];
            let nth = self
                .p
                .node(b.attached_to)
                .boundaries
                .iter()
                .position(|&x| x == ix)
                .unwrap_or(0) as f64;
            self.rel[ix.0 as usize] = Bounds {
                x: host.x + host.w - 18.0 - 20.0 - nth * 42.0,
                y: host.y + host.h - 18.0,
                w: 36.0,
                h: 36.0,
            };
        }
        let grid = route::Grid {
            col_x,
            col_w,
            gap: GAP_X,
            left: -PAD / 2.0,
            bottom: height + 18.0,
            layer: layer[..real].to_vec(),
            chains: chains
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().map(|d| dummy_y[d - real]).collect()))
                .collect(),
        };
        let (routed, (w, h)) = route::scope(self.p, &nodes, &grid, &self.rel, |ix| {
            local(self.anchor(ix))
        });
        self.routed
            .extend(routed.into_iter().map(|(f, pts)| (f, scope, pts)));
        (w.max(x - GAP_X), h)
    }
}

/// The waypoints of a flow between laid-out nodes.
fn route(p: &Process, at: &[Bounds], f: FlowIx) -> Vec<(f64, f64)> {
    let flow = p.flow(f);
    let s = at[flow.source.0 as usize];
    let t = at[flow.target.0 as usize];
    let from_boundary = matches!(p.node(flow.source).kind, NodeKind::Boundary(_));
    let end = t.left_mid();
    if flow.kind == FlowKind::Compensation
        && t.y >= s.bottom()
        && t.x < s.x + s.w
        && s.x < t.x + t.w
    {
        // A compensator below its activity: straight down.
        let start = s.bottom_mid();
        return vec![start, (start.0, t.y)];
    }
    if from_boundary || flow.kind == FlowKind::Compensation {
        let start = s.bottom_mid();
        if end.1 >= start.1 + 10.0 && end.0 > start.0 {
            return vec![start, (start.0, end.1), end];
        }
        let low = s.bottom().max(t.bottom()) + 20.0;
        let tb = t.bottom_mid();
        return vec![start, (start.0, low), (tb.0, low), tb];
    }
    let start = s.right_mid();
    if end.0 > start.0 + 5.0 {
        if (start.1 - end.1).abs() < 1.0 {
            return vec![start, end];
        }
        let mid = start.0 + (end.0 - start.0) / 2.0;
        return vec![start, (mid, start.1), (mid, end.1), end];
    }
    // Backwards (a loop): out of the bottom, along below both, into the bottom.
    let sb = s.bottom_mid();
    let tb = t.bottom_mid();
    let low = s.bottom().max(t.bottom()) + 25.0;
    vec![sb, (sb.0, low), (tb.0, low), tb]
}
