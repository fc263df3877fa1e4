//! Structural checks over a loaded [`Process`]: dialect-independent, so every
//! loader can run them on the IR it built.
//!
//! What is checked (each an error with its own code):
//! - `NO_START_EVENT`: the process, or an embedded sub-process, has no start event;
//! - `INVALID_FLOW`: a flow into a start or boundary event, or out of an end event;
//! - `UNREACHABLE_NODE`: a node no start event reaches (through flows, from an
//!   activity to its boundary events, from a sub-process to its start events).
//!   One diagnostic per unreachable region, naming its first node;
//! - `DEAD_END`: a start event with no outgoing flow. An activity or an
//!   intermediate event without one is an *implicit end* (BPMN 2.0 §10.5.3):
//!   its token ends there, as at a none end event, and its scope completes
//!   when no token is left; a boundary event without flows is a legal
//!   "route-less" outcome;
//! - `GATEWAY_STUCK`, two shapes:
//!   1. a gateway without an outgoing flow;
//!   2. a parallel join one of whose incoming flows is fed, through a chain of
//!      single-entry single-exit nodes without boundary events, by one
//!      outgoing flow `g` of an exclusive split `X`, when `X` has another
//!      outgoing flow `h` from which the flow can neither return to `X` (a
//!      retry loop) nor reach a terminate or error end event. One activation
//!      of `X` sends one token, so taking `h` leaves the join waiting forever.
//!      (A model that feeds the same split with several concurrent tokens to
//!      satisfy such a join is refused too: Sutra treats it as a bug.)
//!
//! The process given must satisfy the `model` invariants (every loader's
//! output does). Nodes in `opaque` stand for elements already reported (e.g.
//! unsupported ones). They count as reached (they are roots), and nothing is
//! reported about them, so one mistake yields one diagnostic. Work is linear in
//! the size of the process, except shape 2, bounded to [`MAX_SPLITS_ANALYSED`]
//! exclusive splits per process.

use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::{EndKind, FlowIx, Node, NodeIx, NodeKind, Process};
use std::collections::{HashMap, HashSet};

/// The most exclusive splits examined for shape 2 of `GATEWAY_STUCK`.
pub const MAX_SPLITS_ANALYSED: usize = 256;

/// Run every structural check; see the module docs.
pub fn structure(p: &Process, opaque: &HashSet<NodeIx>) -> Vec<Diagnostic> {
    let graph = Graph::new(p);
    let mut out = Vec::new();
    no_start(p, opaque, &mut out);
    flow_shapes(p, opaque, &mut out);
    unreachable(p, &graph, opaque, &mut out);
    dead_ends(p, opaque, &mut out);
    gateways(p, &graph, opaque, &mut out);
    out
}

/// `kind `id``: how these checks name a node.
pub fn describe(n: &Node) -> String {
    let kind = match &n.kind {
        NodeKind::Start(_) => "start event",
        NodeKind::End(_) => "end event",
        NodeKind::ServiceTask(_) => "service task",
        NodeKind::ExclusiveGateway { .. } => "exclusive gateway",
        NodeKind::ParallelGateway => "parallel gateway",
        NodeKind::EventGateway => "event-based gateway",
        NodeKind::Throw(_) => "throw event",
        NodeKind::InclusiveGateway => "inclusive gateway",
        NodeKind::Catch(_) => "catch event",
        NodeKind::Boundary(_) => "boundary event",
        NodeKind::SubProcess => "sub-process",
        NodeKind::Pass { .. } => "pass",
        NodeKind::Fanout(f) if f.repeat.is_some() => "repeated activity",
        NodeKind::Fanout(_) => "fan-out",
        NodeKind::CallProcess { .. } => "call activity",
        NodeKind::Escalate { .. } => "escalation throw event",
        NodeKind::Compensate(_) => "compensate throw event",
        NodeKind::EventSubProcess { .. } => "event sub-process",
    };
    format!("{kind} `{}`", written_id(n))
}

/// The id as written: a synthetic node of the loader (`<id>#body`, …) is
/// named after the element it stands for.
fn written_id(n: &Node) -> &str {
    n.id.split('#').next().unwrap_or(&n.id)
}

fn at(n: &Node, code: Code, message: String) -> Diagnostic {
    Diagnostic::error(code, message)
        .at(n.pos)
        .element(written_id(n).to_string())
}

/// Forward edges: flows, activity → its boundaries, fan-out → its branches, sub-process → its start
/// events, end event → its enclosing sub-process (whose outgoing flows follow).
struct Graph {
    succ: Vec<Vec<u32>>,
    pred: Vec<Vec<u32>>,
}

impl Graph {
    fn new(p: &Process) -> Graph {
        let n = p.nodes.len();
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); n];
        let valid = |ix: NodeIx| (ix.0 as usize) < n;
        for f in &p.flows {
            if valid(f.source) && valid(f.target) {
                succ[f.source.0 as usize].push(f.target.0);
            }
        }
        for node in &p.nodes {
            let i = node.ix.0 as usize;
            if i >= n {
                continue;
            }
            for &b in &node.boundaries {
                if valid(b) {
                    succ[i].push(b.0);
                }
            }
            if let NodeKind::Fanout(f) = &node.kind {
                // A repeated activity's body enters its branch (build/repeat.rs).
                succ[i].extend(f.branches.iter().filter(|&&b| valid(b)).map(|b| b.0));
            }
            if let Some(s) = node.scope.filter(|&s| valid(s)) {
                if matches!(node.kind, NodeKind::Start(_)) {
                    succ[s.0 as usize].push(node.ix.0);
                }
                if matches!(node.kind, NodeKind::End(_)) {
                    succ[i].push(s.0);
                }
            }
        }
        let mut pred: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, targets) in succ.iter().enumerate() {
            for &t in targets {
                pred[t as usize].push(i as u32);
            }
        }
        Graph { succ, pred }
    }

    /// Mark everything reachable from `roots` along `edges`.
    fn flood(edges: &[Vec<u32>], roots: impl IntoIterator<Item = u32>, seen: &mut [bool]) -> usize {
        let mut stack: Vec<u32> = Vec::new();
        let mut count = 0;
        for r in roots {
            if let Some(s) = seen.get_mut(r as usize) {
                if !*s {
                    *s = true;
                    count += 1;
                    stack.push(r);
                }
            }
        }
        while let Some(i) = stack.pop() {
            for &t in &edges[i as usize] {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    count += 1;
                    stack.push(t);
                }
            }
        }
        count
    }
}

fn no_start(p: &Process, opaque: &HashSet<NodeIx>, out: &mut Vec<Diagnostic>) {
    if p.starts_in(None).next().is_none() {
        out.push(
            Diagnostic::error(
                Code::BpmnNoStartEvent,
                format!("process `{}` has no start event", p.id),
            )
            .at(p.pos)
            .element(p.id.clone()),
        );
    }
    for n in &p.nodes {
        if matches!(n.kind, NodeKind::SubProcess)
            && !opaque.contains(&n.ix)
            && p.starts_in(Some(n.ix)).next().is_none()
        {
            out.push(at(
                n,
                Code::BpmnNoStartEvent,
                format!("{} has no start event", describe(n)),
            ));
        }
    }
}

fn flow_shapes(p: &Process, opaque: &HashSet<NodeIx>, out: &mut Vec<Diagnostic>) {
    for f in &p.flows {
        let (Some(src), Some(tgt)) = (
            p.nodes.get(f.source.0 as usize),
            p.nodes.get(f.target.0 as usize),
        ) else {
            continue;
        };
        let problem = if !opaque.contains(&f.target)
            && matches!(tgt.kind, NodeKind::Start(_) | NodeKind::Boundary(_))
        {
            Some(format!("enters {}", describe(tgt)))
        } else if !opaque.contains(&f.source) && matches!(src.kind, NodeKind::End(_)) {
            Some(format!("leaves {}", describe(src)))
        } else {
            None
        };
        if let Some(problem) = problem {
            out.push(
                Diagnostic::error(
                    Code::BpmnInvalidFlow,
                    format!("sequence flow `{}` {problem}", f.id),
                )
                .at(f.pos)
                .element(f.id.clone()),
            );
        }
    }
}

fn unreachable(p: &Process, g: &Graph, opaque: &HashSet<NodeIx>, out: &mut Vec<Diagnostic>) {
    let n = p.nodes.len();
    let mut reached = vec![false; n];
    // A scope without a start event was reported already (`NO_START_EVENT`):
    // its entry nodes count as roots rather than as unreachable.
    let startless: HashSet<Option<NodeIx>> = std::iter::once(None)
        .chain(
            p.nodes
                .iter()
                .filter(|x| matches!(x.kind, NodeKind::SubProcess))
                .map(|x| Some(x.ix)),
        )
        .filter(|&s| p.starts_in(s).next().is_none())
        .collect();
    let roots = p
        .nodes
        .iter()
        .filter(|x| {
            (x.scope.is_none() && matches!(x.kind, NodeKind::Start(_)))
                || matches!(x.kind, NodeKind::EventSubProcess { .. })
                || opaque.contains(&x.ix)
                || (startless.contains(&x.scope)
                    && x.incoming.is_empty()
                    && !matches!(x.kind, NodeKind::Boundary(_)))
        })
        .map(|x| x.ix.0);
    Graph::flood(&g.succ, roots, &mut reached);
    // Children of a sub-process are flooded through it: cover them with it.
    let mut cover_edges = g.succ.clone();
    for x in &p.nodes {
        if let Some(s) = x.scope.filter(|s| (s.0 as usize) < n) {
            cover_edges[s.0 as usize].push(x.ix.0);
        }
    }
    let mut covered = reached.clone();
    let heads = |covered: &[bool], no_incoming_only: bool| -> Vec<u32> {
        p.nodes
            .iter()
            .filter(|x| !covered[x.ix.0 as usize] && !matches!(x.kind, NodeKind::Boundary(_)))
            .filter(|x| !no_incoming_only || g.pred[x.ix.0 as usize].is_empty())
            .map(|x| x.ix.0)
            .collect()
    };
    for pass_no_incoming in [true, false] {
        for head in heads(&covered, pass_no_incoming) {
            if covered[head as usize] {
                continue;
            }
            let count = Graph::flood(&cover_edges, [head], &mut covered);
            let node = &p.nodes[head as usize];
            let more = match count.saturating_sub(1) {
                0 => String::new(),
                1 => " (nor is the node after it)".to_string(),
                k => format!(" (nor are the {k} nodes after it)"),
            };
            out.push(at(
                node,
                Code::BpmnUnreachableNode,
                format!(
                    "{} is not reachable from any start event{more}",
                    describe(node)
                ),
            ));
        }
    }
}

fn dead_ends(p: &Process, opaque: &HashSet<NodeIx>, out: &mut Vec<Diagnostic>) {
    for n in &p.nodes {
        // Activities and intermediate events end their token implicitly.
        let needs_out = matches!(n.kind, NodeKind::Start(_));
        if needs_out && n.outgoing.is_empty() && !opaque.contains(&n.ix) {
            out.push(at(
                n,
                Code::BpmnDeadEnd,
                format!(
                    "{} has no outgoing sequence flow: the token it starts would go nowhere",
                    describe(n)
                ),
            ));
        }
    }
}

fn gateways(p: &Process, g: &Graph, opaque: &HashSet<NodeIx>, out: &mut Vec<Diagnostic>) {
    for n in &p.nodes {
        let gateway = matches!(
            n.kind,
            NodeKind::ExclusiveGateway { .. }
                | NodeKind::ParallelGateway
                | NodeKind::InclusiveGateway
        );
        if gateway && n.outgoing.is_empty() && !opaque.contains(&n.ix) {
            out.push(at(
                n,
                Code::BpmnGatewayStuck,
                format!(
                    "{} has no outgoing sequence flow: a token reaching it stays there forever",
                    describe(n)
                ),
            ));
        }
    }
    let mut splits = Splits {
        p,
        g,
        cache: HashMap::new(),
    };
    for join in &p.nodes {
        if !matches!(join.kind, NodeKind::ParallelGateway)
            || join.incoming.len() < 2
            || opaque.contains(&join.ix)
        {
            continue;
        }
        for &f in &join.incoming {
            let Some((x, taken)) = trace_to_split(p, f, opaque) else {
                continue;
            };
            let Some(other) = splits.escape(x, taken, join.ix) else {
                continue;
            };
            let (xn, fl) = (p.node(x), p.flow(f));
            out.push(at(
                join,
                Code::BpmnGatewayStuck,
                format!(
                    "{} waits for a token on flow `{}`, which only arrives when {} takes flow `{}`; \
                     when it takes flow `{}` instead, the join waits forever",
                    describe(join),
                    fl.id,
                    describe(xn),
                    p.flow(taken).id,
                    p.flow(other).id
                ),
            ));
            break;
        }
    }
}

/// Follow `f` backwards through single-entry single-exit nodes without
/// boundaries; `Some((split, flow out of the split))` when it starts at an exclusive split.
fn trace_to_split(p: &Process, f: FlowIx, opaque: &HashSet<NodeIx>) -> Option<(NodeIx, FlowIx)> {
    let mut cur = f;
    for _ in 0..=p.nodes.len() {
        let src = p.flows.get(cur.0 as usize)?.source;
        let node = p.nodes.get(src.0 as usize)?;
        if opaque.contains(&src) {
            return None;
        }
        if matches!(node.kind, NodeKind::ExclusiveGateway { .. }) && node.outgoing.len() >= 2 {
            return Some((src, cur));
        }
        let chain = node.incoming.len() == 1
            && node.outgoing.len() == 1
            && node.boundaries.is_empty()
            && !matches!(
                node.kind,
                NodeKind::Start(_) | NodeKind::Boundary(_) | NodeKind::SubProcess
            );
        if !chain {
            return None;
        }
        cur = node.incoming[0];
    }
    None
}

/// Per (exclusive split, join): which nodes can return to the split or reach
/// an abrupt end without passing the join (lazily, bounded).
struct Splits<'p> {
    p: &'p Process,
    g: &'p Graph,
    cache: HashMap<(NodeIx, NodeIx), Option<Vec<bool>>>,
}

impl Splits<'_> {
    /// Another outgoing flow of `x` than `taken` from which the flow can
    /// neither return to `x` nor reach a terminate or error end (paths through
    /// the stuck `join` do not count).
    fn escape(&mut self, x: NodeIx, taken: FlowIx, join: NodeIx) -> Option<FlowIx> {
        let n = self.p.nodes.len();
        if !self.cache.contains_key(&(x, join)) {
            let entry = if self.cache.len() >= MAX_SPLITS_ANALYSED {
                None
            } else {
                let mut harmless = vec![false; n];
                harmless[join.0 as usize] = true; // blocked: never traversed
                let abrupt = self
                    .p
                    .nodes
                    .iter()
                    .filter(|m| {
                        matches!(
                            m.kind,
                            NodeKind::End(EndKind::Terminate | EndKind::Error { .. })
                        )
                    })
                    .map(|m| m.ix.0);
                Graph::flood(&self.g.pred, abrupt.chain([x.0]), &mut harmless);
                harmless[join.0 as usize] = false;
                Some(harmless)
            };
            self.cache.insert((x, join), entry);
        }
        let harmless = self.cache.get(&(x, join))?.as_ref()?;
        self.p.node(x).outgoing.iter().copied().find(|&h| {
            h != taken && {
                let t = self.p.flow(h).target.0 as usize;
                t < n && !harmless[t]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::codes::Code;
    use crate::dialect::bpmn::load;

    /// A process from `(id, tag)` nodes and `(source, target)` flows; an
    /// exclusive gateway's first outgoing flow gets a condition, its last is the default.
    fn codes(nodes: &[(&str, &str)], flows: &[(&str, &str)]) -> Vec<Code> {
        let mut xml = String::from(
            r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"><process id="P" isExecutable="true">"#,
        );
        for (id, tag) in nodes {
            let attrs = match *tag {
                "serviceTask" => r#" implementation="registered:t""#.to_string(),
                "exclusiveGateway" if flows.iter().filter(|(s, _)| s == id).count() > 1 => {
                    let last = flows.iter().rposition(|(s, _)| s == id);
                    last.map(|i| format!(r#" default="f{i}""#))
                        .unwrap_or_default()
                }
                _ => String::new(),
            };
            let body = if *tag == "terminate" {
                "<terminateEventDefinition/>"
            } else {
                ""
            };
            let tag = if *tag == "terminate" { "endEvent" } else { tag };
            xml.push_str(&format!(r#"<{tag} id="{id}"{attrs}>{body}</{tag}>"#));
        }
        for (i, (s, t)) in flows.iter().enumerate() {
            let first_out = flows.iter().position(|(x, _)| x == s) == Some(i);
            let split = flows.iter().filter(|(x, _)| x == s).count() > 1;
            let xor = split
                && nodes
                    .iter()
                    .any(|(id, tag)| id == s && *tag == "exclusiveGateway");
            let cond = if xor && first_out {
                "<conditionExpression>c</conditionExpression>"
            } else {
                ""
            };
            xml.push_str(&format!(
                r#"<sequenceFlow id="f{i}" sourceRef="{s}" targetRef="{t}">{cond}</sequenceFlow>"#
            ));
        }
        xml.push_str("</process></definitions>");
        let loaded = load(&xml);
        loaded.errors().map(|d| d.code).collect()
    }

    const DIAMOND: &[(&str, &str)] = &[
        ("s", "startEvent"),
        ("x", "exclusiveGateway"),
        ("a", "serviceTask"),
        ("b", "serviceTask"),
        ("j", "parallelGateway"),
        ("e", "endEvent"),
    ];

    #[test]
    fn an_exclusive_split_into_a_parallel_join_is_stuck() {
        let flows = [
            ("s", "x"),
            ("x", "a"),
            ("x", "b"),
            ("a", "j"),
            ("b", "j"),
            ("j", "e"),
        ];
        assert_eq!(codes(DIAMOND, &flows), vec![Code::BpmnGatewayStuck]);
        // Even when one branch goes straight to the join.
        let flows = [
            ("s", "x"),
            ("x", "a"),
            ("x", "j"),
            ("a", "j"),
            ("j", "e"),
            ("b", "e"),
        ];
        let got = codes(DIAMOND, &flows);
        assert!(got.contains(&Code::BpmnGatewayStuck), "{got:?}");
    }

    #[test]
    fn a_parallel_split_into_a_parallel_join_is_fine() {
        let mut nodes = DIAMOND.to_vec();
        nodes[1] = ("x", "parallelGateway");
        let flows = [
            ("s", "x"),
            ("x", "a"),
            ("x", "b"),
            ("a", "j"),
            ("b", "j"),
            ("j", "e"),
        ];
        assert_eq!(codes(&nodes, &flows), vec![]);
    }

    #[test]
    fn an_exclusive_split_merged_by_an_exclusive_gateway_is_fine() {
        let mut nodes = DIAMOND.to_vec();
        nodes[4] = ("j", "exclusiveGateway");
        let flows = [
            ("s", "x"),
            ("x", "a"),
            ("x", "b"),
            ("a", "j"),
            ("b", "j"),
            ("j", "e"),
        ];
        assert_eq!(codes(&nodes, &flows), vec![]);
    }

    #[test]
    fn a_retry_loop_or_a_terminating_branch_does_not_make_a_join_stuck() {
        let nodes = [
            ("s", "startEvent"),
            ("f", "parallelGateway"),
            ("a", "serviceTask"),
            ("x", "exclusiveGateway"),
            ("fix", "serviceTask"),
            ("b", "serviceTask"),
            ("y", "exclusiveGateway"),
            ("stop", "terminate"),
            ("j", "parallelGateway"),
            ("e", "endEvent"),
        ];
        // x: fix loops back to a; y: its other branch terminates the instance.
        let flows = [
            ("s", "f"),
            ("f", "a"),
            ("a", "x"),
            ("x", "fix"),
            ("fix", "a"),
            ("x", "j"),
            ("f", "b"),
            ("b", "y"),
            ("y", "stop"),
            ("y", "j"),
            ("j", "e"),
        ];
        assert_eq!(codes(&nodes, &flows), vec![]);
    }

    #[test]
    fn a_terminate_after_the_stuck_join_does_not_excuse_it() {
        let mut nodes = DIAMOND.to_vec();
        nodes[5] = ("e", "terminate");
        let flows = [
            ("s", "x"),
            ("x", "a"),
            ("x", "b"),
            ("a", "j"),
            ("b", "j"),
            ("j", "e"),
        ];
        assert_eq!(codes(&nodes, &flows), vec![Code::BpmnGatewayStuck]);
    }

    #[test]
    fn an_unsupported_element_is_reported_once_not_as_unreachable_or_dead_end() {
        let nodes = [
            ("s", "startEvent"),
            ("u", "userTask"),
            ("t", "serviceTask"),
            ("e", "endEvent"),
        ];
        let flows = [("s", "t"), ("t", "e"), ("u", "e")];
        assert_eq!(codes(&nodes, &flows), vec![Code::BpmnUnsupportedElement]);
    }
}
