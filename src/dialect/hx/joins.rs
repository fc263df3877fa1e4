//! The static check of `join="all"` (HX-2008): a node that waits for every
//! incoming edge, fed by edges that are never all taken, can never run.
//!
//! Each incoming edge of a `join="all"` node is traced back through nodes
//! with exactly one incoming edge, collecting what must hold for it to be
//! taken: at each source, "the source succeeded" (a control or data edge),
//! "it failed" (an error edge) and the edge's `when` guard. Two incoming
//! edges whose traces meet at the same source with excluding requirements
//! (its error edge and its success path, or guards one of which negates the
//! other: `Expr::excludes`) are never both taken: every run that takes one
//! fails with `SUTRA.RUNTIME.JOIN.DEAD_EDGE` at the join (or skips it when
//! neither is taken). BPMN refuses the same shape (a parallel join after an
//! exclusive split, `GATEWAY_STUCK`); the fix here is `join="any"`.
//!
//! Bounded whatever the document: a trace is at most as long as the node
//! count (a cycle, already refused as HX-2003, cannot make it loop), and at
//! most [`MAX_PAIRS`] pairs of guards are compared per join.

use super::parse::{EdgeKind, RawEdge, Workflow};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::JoinRule;
use std::collections::HashMap;

/// The most guard comparisons made for one join node.
const MAX_PAIRS: usize = 10_000;

/// What must hold at a source node for a traced edge to be taken.
#[derive(Clone, Copy)]
enum Need<'a, 'd> {
    Succeeded(&'a RawEdge<'d>),
    Failed(&'a RawEdge<'d>),
    Guard(&'a RawEdge<'d>),
}

impl<'a, 'd> Need<'a, 'd> {
    fn edge(self) -> &'a RawEdge<'d> {
        match self {
            Need::Succeeded(e) | Need::Failed(e) | Need::Guard(e) => e,
        }
    }

    fn excludes(self, other: Need<'_, '_>) -> bool {
        match (self, other) {
            (Need::Succeeded(_), Need::Failed(_)) | (Need::Failed(_), Need::Succeeded(_)) => true,
            (Need::Guard(a), Need::Guard(b)) => match (&a.when, &b.when) {
                (Some(x), Some(y)) => x.excludes(y),
                _ => false,
            },
            _ => false,
        }
    }
}

/// Check every `join="all"` node; `edges` are the resolved (raw edge, from, to).
pub(super) fn check(
    wf: &Workflow<'_>,
    edges: &[(&RawEdge<'_>, usize, usize)],
    out: &mut Vec<Diagnostic>,
) {
    let n = wf.nodes.len();
    let mut incoming: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &(e, _, to)) in edges.iter().enumerate() {
        if e.kind.is_forward() {
            incoming[to].push(i);
        }
    }
    for (j, node) in wf.nodes.iter().enumerate() {
        if node.join != JoinRule::All || incoming[j].len() < 2 {
            continue;
        }
        // Source node → (which incoming edge of j, what it needs there).
        let mut at: HashMap<usize, Vec<(usize, Need<'_, '_>)>> = HashMap::new();
        for (k, &first) in incoming[j].iter().enumerate() {
            let mut cur = first;
            for _ in 0..n {
                let (e, from, _) = edges[cur];
                let needs = at.entry(from).or_default();
                match e.kind {
                    EdgeKind::Error => needs.push((k, Need::Failed(e))),
                    _ => {
                        needs.push((k, Need::Succeeded(e)));
                        if e.when.is_some() {
                            needs.push((k, Need::Guard(e)));
                        }
                    }
                }
                match incoming[from].as_slice() {
                    [only] => cur = *only,
                    _ => break,
                }
            }
        }
        let mut compared = 0usize;
        let mut sources: Vec<_> = at.into_iter().collect();
        sources.sort_by_key(|(s, _)| *s);
        'sources: for (source, needs) in sources {
            for (x, &(ka, a)) in needs.iter().enumerate() {
                for &(kb, b) in &needs[x + 1..] {
                    compared += 1;
                    if compared > MAX_PAIRS {
                        break 'sources;
                    }
                    if ka == kb || !a.excludes(b) {
                        continue;
                    }
                    out.push(refusal(
                        wf,
                        j,
                        source,
                        edges,
                        incoming[j][ka],
                        a,
                        incoming[j][kb],
                        b,
                    ));
                    // One diagnostic per join node: the fix is the same.
                    break 'sources;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn refusal(
    wf: &Workflow<'_>,
    join: usize,
    source: usize,
    edges: &[(&RawEdge<'_>, usize, usize)],
    in_a: usize,
    a: Need<'_, '_>,
    in_b: usize,
    b: Need<'_, '_>,
) -> Diagnostic {
    let node = &wf.nodes[join];
    let src = &wf.nodes[source].id;
    let arm = |need: Need<'_, '_>| {
        let e = need.edge();
        match need {
            Need::Failed(_) => format!("`{src}` fails (its error edge to `{}`)", e.to),
            Need::Succeeded(_) => format!("`{src}` succeeds (its edge to `{}`)", e.to),
            Need::Guard(_) => format!(
                "`{src}` takes its edge to `{}` (when=\"{}\")",
                e.to,
                e.when.as_ref().map(|w| w.source()).unwrap_or_default()
            ),
        }
    };
    let from = |i: usize| &edges[i].0.from;
    Diagnostic::error(
        Code::HxJoinUnsatisfiable,
        format!(
            "node `{}` waits for all its incoming edges (join=\"all\"), but its edge from `{}` is taken only when {} \
             and its edge from `{}` only when {}, which never both happen: every run reaching it fails with {}. \
             Write join=\"any\" to run it on whichever arrives",
            node.id,
            from(in_a),
            arm(a),
            from(in_b),
            arm(b),
            Code::JoinDeadEdge.as_str()
        ),
    )
    .at(node.el.pos)
    .element(node.el.label().to_string())
}
