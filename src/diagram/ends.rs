//! End events drawn for HX flows (issue 35 item 1): an HX workflow has no
//! end nodes — a path ends where a node has nothing after it — so its
//! diagram draws an end event after each such node, as a BPMN export would.
//!
//! Invariants:
//! - only the drawing changes: the process the runtime runs is never
//!   touched (the export works on a copy);
//! - a drawn end is `X#end` in `sutra:node` (an internal id: no label, and
//!   no overlay ever lands on it), in X's scope, with a flow from X;
//! - X is every node of an HX process with no outgoing control, data or
//!   error flow, except a compensator (it runs only while unwinding), a
//!   boundary event, an event sub-process and an end node.

use crate::model::{Dialect, EndKind, Flow, FlowIx, FlowKind, Node, NodeIx, NodeKind, Process};
use std::borrow::Cow;

/// The process as drawn: `p` itself, or for HX a copy with the end events.
pub(crate) fn drawn(p: &Process) -> Cow<'_, Process> {
    if p.dialect != Dialect::Hx {
        return Cow::Borrowed(p);
    }
    let ends: Vec<NodeIx> = p
        .nodes
        .iter()
        .filter(|n| ends_a_path(p, n))
        .map(|n| n.ix)
        .collect();
    if ends.is_empty() {
        return Cow::Borrowed(p);
    }
    let mut q = p.clone();
    for last in ends {
        let from = p.node(last);
        let ix = NodeIx(q.nodes.len() as u32);
        let fx = FlowIx(q.flows.len() as u32);
        let mut id = format!("{}#end", from.id);
        while q.by_id.contains_key(&id) || q.nodes.iter().any(|n| n.id == id) {
            id.push('_');
        }
        q.flows.push(Flow {
            ix: fx,
            id: format!("{}->{id}", from.id),
            pos: from.pos,
            source: last,
            target: ix,
            condition: None,
            kind: FlowKind::Sequence,
        });
        q.nodes.push(Node {
            ix,
            id,
            name: None,
            pos: from.pos,
            scope: from.scope,
            kind: NodeKind::End(EndKind::None),
            incoming: vec![fx],
            outgoing: Vec::new(),
            boundaries: Vec::new(),
            join: None,
            data: None,
        });
        q.nodes[last.0 as usize].outgoing.push(fx);
    }
    q.index();
    Cow::Owned(q)
}

/// Whether a path of `p` ends at `n` (nothing runs after it).
fn ends_a_path(p: &Process, n: &Node) -> bool {
    let goes_on = n
        .outgoing
        .iter()
        .any(|&f| p.flow(f).kind != FlowKind::Compensation);
    let compensator = n
        .incoming
        .iter()
        .any(|&f| p.flow(f).kind == FlowKind::Compensation);
    !goes_on
        && !compensator
        && !matches!(
            n.kind,
            NodeKind::End(_) | NodeKind::Boundary(_) | NodeKind::EventSubProcess { .. }
        )
}
