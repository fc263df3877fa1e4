//! The HX graph checks (duplicate ids, dangling and duplicate edges, cycles,
//! compensation rules) and the IR.
//!
//! Whatever the diagnostics, the IR keeps the model invariants: a duplicate
//! node is left out, an edge with a missing end is left out.

use super::parse::{EdgeKind, RawEdge, RawKind, RawNode, Workflow};
use super::START_ID;
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::dialect::xml::Element;
use crate::model::CatchTrigger;
use crate::model::{
    Dialect, Flow, FlowIx, FlowKind, IoMapping, Node, NodeIx, NodeKind, Process, ServiceTask,
    StartTrigger,
};
use std::collections::{HashMap, HashSet};

fn diag(code: Code, el: &Element, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(code, message)
        .at(el.pos)
        .element(el.label().to_string())
}

/// Check the graph and build the process.
pub(super) fn build(wf: &Workflow<'_>, out: &mut Vec<Diagnostic>) -> Process {
    // Node ids → index into wf.nodes (the first of duplicates wins).
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (i, n) in wf.nodes.iter().enumerate() {
        if n.id.is_empty() {
            continue;
        }
        if ids.contains_key(n.id.as_str()) {
            out.push(diag(
                Code::HxDuplicateId,
                n.el,
                format!("node id `{}` is used twice", n.id),
            ));
        } else {
            ids.insert(n.id.as_str(), i);
        }
    }
    if wf.nodes.is_empty() {
        out.push(
            Diagnostic::error(
                Code::HxEmptyWorkflow,
                format!("workflow `{}` has no node", wf.id),
            )
            .at(wf.pos)
            .element(wf.id.clone()),
        );
    }
    let edges = check_edges(wf, &ids, out);
    check_compensation(wf, &ids, &edges, out);
    check_cycles(wf, &edges, out);
    super::joins::check(wf, &edges, out);
    ir(wf, &ids, &edges, out)
}

/// An edge whose ends exist: (raw edge, from index, to index).
type Resolved<'a, 'd> = (&'a RawEdge<'d>, usize, usize);

fn check_edges<'a, 'd>(
    wf: &'a Workflow<'d>,
    ids: &HashMap<&str, usize>,
    out: &mut Vec<Diagnostic>,
) -> Vec<Resolved<'a, 'd>> {
    let mut resolved = Vec::new();
    let mut seen: HashSet<(usize, usize, bool, bool)> = HashSet::new();
    for e in &wf.edges {
        let (Some(&from), Some(&to)) = (ids.get(e.from.as_str()), ids.get(e.to.as_str())) else {
            for end in [&e.from, &e.to] {
                if !ids.contains_key(end.as_str()) {
                    out.push(diag(
                        Code::HxDanglingEdge,
                        e.el,
                        format!("edge {} → {}: there is no node `{end}`", e.from, e.to),
                    ));
                }
            }
            continue;
        };
        let label = format!("{} edge {} → {}", e.kind.as_str(), e.from, e.to);
        if from == to {
            out.push(diag(
                Code::HxCycle,
                e.el,
                format!("{label} loops on itself"),
            ));
            continue;
        }
        let class = (
            from,
            to,
            e.kind == EdgeKind::Error,
            e.kind == EdgeKind::Compensation,
        );
        if !seen.insert(class) {
            out.push(diag(
                Code::HxInvalidEdge,
                e.el,
                format!("{label} is declared twice (control and data edges both order execution)"),
            ));
            continue;
        }
        let (src, dst) = (&wf.nodes[from], &wf.nodes[to]);
        let invalid = matches!(src.kind, RawKind::Invalid) || matches!(dst.kind, RawKind::Invalid);
        match e.kind {
            // Already refused: keep it out of the IR without a second diagnostic.
            EdgeKind::Error | EdgeKind::Compensation if invalid => continue,
            EdgeKind::Error if !src.kind.is_task() => {
                out.push(diag(
                    Code::HxInvalidEdge,
                    e.el,
                    format!("{label}: only a task can fail, `{}` is not one", e.from),
                ));
                continue;
            }
            EdgeKind::Compensation if !(src.kind.is_task() && dst.kind.is_task()) => {
                out.push(diag(
                    Code::HxInvalidEdge,
                    e.el,
                    format!("{label}: a compensation edge joins two task nodes (the compensated task and its compensator)"),
                ));
                continue;
            }
            _ => {}
        }
        resolved.push((e, from, to));
    }
    resolved
}

fn check_compensation(
    wf: &Workflow<'_>,
    ids: &HashMap<&str, usize>,
    edges: &[Resolved<'_, '_>],
    out: &mut Vec<Diagnostic>,
) {
    let comp: Vec<&Resolved<'_, '_>> = edges
        .iter()
        .filter(|(e, _, _)| e.kind == EdgeKind::Compensation)
        .collect();
    let compensators: HashSet<usize> = comp.iter().map(|&&(_, _, to)| to).collect();
    let mut out_count: HashMap<usize, usize> = HashMap::new();
    let mut in_count: HashMap<usize, usize> = HashMap::new();
    for &&(e, from, to) in &comp {
        let o = out_count.entry(from).or_default();
        *o += 1;
        if *o > 1 {
            out.push(diag(
                Code::HxInvalidEdge,
                e.el,
                format!(
                    "`{}` has a second compensation edge: a node has one compensator",
                    e.from
                ),
            ));
        }
        let i = in_count.entry(to).or_default();
        *i += 1;
        if *i > 1 {
            out.push(diag(
                Code::HxInvalidEdge,
                e.el,
                format!(
                    "`{}` already compensates another node: a compensator compensates one node",
                    e.to
                ),
            ));
        }
        if compensators.contains(&from) {
            out.push(diag(
                Code::HxInvalidEdge,
                e.el,
                format!(
                    "`{}` is itself a compensator: a rollback of a rollback never runs",
                    e.from
                ),
            ));
        }
    }
    for &(e, from, to) in edges {
        if !e.kind.is_forward() {
            continue;
        }
        if compensators.contains(&to) {
            out.push(diag(
                Code::HxCompensatorReachable,
                e.el,
                format!(
                    "{} edge {} → {}: `{}` is a compensator and must not be reachable by forward edges (it would run at the wrong time)",
                    e.kind.as_str(), e.from, e.to, e.to
                ),
            ));
        } else if compensators.contains(&from) {
            out.push(diag(
                Code::HxInvalidEdge,
                e.el,
                format!(
                    "{} edge {} → {}: `{}` is a compensator; it runs only during an unwind and leads nowhere",
                    e.kind.as_str(), e.from, e.to, e.from
                ),
            ));
        }
    }
    for n in &wf.nodes {
        let Some(target) = &n.compensates else {
            continue;
        };
        let Some(&t) = ids.get(target.as_str()) else {
            out.push(diag(
                Code::HxDanglingEdge,
                n.el,
                format!(
                    "node `{}` compensates `{target}`, but there is no such node",
                    n.id
                ),
            ));
            continue;
        };
        let me = ids.get(n.id.as_str()).copied();
        let agrees = comp
            .iter()
            .any(|&&(_, from, to)| from == t && Some(to) == me);
        if !agrees {
            let edge_says = comp
                .iter()
                .find(|&&&(_, _, to)| Some(to) == me)
                .map(|&&(e, _, _)| format!("its compensation edge comes from `{}`", e.from))
                .unwrap_or_else(|| format!("there is no compensation edge from `{target}` to it"));
            out.push(diag(
                Code::HxCompensatesMismatch,
                n.el,
                format!(
                    "node `{}` says compensates=\"{target}\" but {edge_says}",
                    n.id
                ),
            ));
        }
    }
}

/// Report every back edge of the forward (control, data, error) graph.
fn check_cycles(wf: &Workflow<'_>, edges: &[Resolved<'_, '_>], out: &mut Vec<Diagnostic>) {
    let n = wf.nodes.len();
    let mut adj: Vec<Vec<(usize, &RawEdge<'_>)>> = vec![Vec::new(); n];
    for &(e, from, to) in edges {
        if e.kind.is_forward() {
            adj[from].push((to, e));
        }
    }
    // 0 = unvisited, 1 = on the stack, 2 = done. Iterative: no recursion on hostile depth.
    let mut color = vec![0u8; n];
    for root in 0..n {
        if color[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        color[root] = 1;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&(w, e)) = adj[v].get(*next) {
                *next += 1;
                match color[w] {
                    0 => {
                        color[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => out.push(diag(
                        Code::HxCycle,
                        e.el,
                        format!(
                            "{} edge {} → {} closes a cycle: an HX workflow is acyclic",
                            e.kind.as_str(),
                            e.from,
                            e.to
                        ),
                    )),
                    _ => {}
                }
            } else {
                color[v] = 2;
                stack.pop();
            }
        }
    }
}

fn ir(
    wf: &Workflow<'_>,
    ids: &HashMap<&str, usize>,
    edges: &[Resolved<'_, '_>],
    out: &mut Vec<Diagnostic>,
) -> Process {
    let mut p = Process {
        id: wf.id.clone(),
        name: wf.name.clone(),
        executable: true,
        dialect: Dialect::Hx,
        pos: wf.pos,
        nodes: Vec::new(),
        flows: Vec::new(),
        business_key: None,
        by_id: HashMap::new(),
    };
    let start = push_node(
        &mut p,
        START_ID.to_string(),
        None,
        wf.pos,
        NodeKind::Start(StartTrigger::None),
        None,
    );
    // Raw node index → IR index (only the first of duplicate ids).
    let mut ix: HashMap<usize, NodeIx> = HashMap::new();
    for (i, n) in wf.nodes.iter().enumerate() {
        if ids.get(n.id.as_str()) != Some(&i) {
            continue;
        }
        let kind = node_kind(n);
        let name = n.el.attr("name").map(str::to_string);
        let nix = push_node(&mut p, n.id.clone(), name, n.el.pos, kind, Some(n.join));
        ix.insert(i, nix);
    }
    let mut has_forward_in: HashSet<usize> = HashSet::new();
    let mut compensators: HashSet<usize> = HashSet::new();
    for &(e, from, to) in edges {
        let kind = match e.kind {
            EdgeKind::Control | EdgeKind::Data => FlowKind::Sequence,
            EdgeKind::Error => FlowKind::Error,
            EdgeKind::Compensation => FlowKind::Compensation,
        };
        if e.kind.is_forward() {
            has_forward_in.insert(to);
        } else {
            compensators.insert(to);
        }
        let id = match e.kind {
            EdgeKind::Control | EdgeKind::Data => format!("{}->{}", e.from, e.to),
            // `[` never occurs in an id: flow ids stay unique.
            other => format!("{}->{}[{}]", e.from, e.to, other.as_str()),
        };
        push_flow(
            &mut p,
            id,
            e.el.pos,
            ix[&from],
            ix[&to],
            e.when.clone(),
            kind,
        );
    }
    let mut entries = 0;
    for i in 0..wf.nodes.len() {
        let Some(&nix) = ix.get(&i) else { continue };
        if has_forward_in.contains(&i) || compensators.contains(&i) {
            continue;
        }
        entries += 1;
        let id = format!("{START_ID}->{}", p.node(nix).id);
        push_flow(&mut p, id, wf.pos, start, nix, None, FlowKind::Sequence);
    }
    if entries == 0 && !wf.nodes.is_empty() && !out.iter().any(|d| d.code == Code::HxCycle) {
        out.push(
            Diagnostic::error(
                Code::HxEmptyWorkflow,
                format!("workflow `{}` has no entry node (one without incoming control, data or error edges)", wf.id),
            )
            .at(wf.pos)
            .element(wf.id.clone()),
        );
    }
    p.index();
    p
}

fn node_kind(n: &RawNode<'_>) -> NodeKind {
    match &n.kind {
        RawKind::Task {
            implementation,
            result_path,
            retry,
            timeout,
            idempotent,
        } => NodeKind::ServiceTask(ServiceTask {
            implementation: implementation.clone(),
            retries: retry.iter().cloned().collect(),
            timeout: timeout.clone(),
            idempotent: *idempotent,
            io: IoMapping {
                input_path: None,
                result_path: result_path.clone(),
            },
        }),
        RawKind::Wait(spec) => NodeKind::Catch(CatchTrigger::Timer(spec.clone())),
        RawKind::Pass | RawKind::Invalid => NodeKind::Pass { set: None },
    }
}

fn push_node(
    p: &mut Process,
    id: String,
    name: Option<String>,
    pos: crate::diag::Pos,
    kind: NodeKind,
    join: Option<crate::model::JoinRule>,
) -> NodeIx {
    let ix = NodeIx(p.nodes.len() as u32);
    p.nodes.push(Node {
        ix,
        id,
        name,
        pos,
        scope: None,
        kind,
        incoming: Vec::new(),
        outgoing: Vec::new(),
        boundaries: Vec::new(),
        join,
        data: None,
    });
    ix
}

fn push_flow(
    p: &mut Process,
    id: String,
    pos: crate::diag::Pos,
    source: NodeIx,
    target: NodeIx,
    condition: Option<crate::model::Expr>,
    kind: FlowKind,
) {
    let ix = FlowIx(p.flows.len() as u32);
    p.flows.push(Flow {
        ix,
        id,
        pos,
        source,
        target,
        condition,
        kind,
    });
    p.nodes[source.0 as usize].outgoing.push(ix);
    p.nodes[target.0 as usize].incoming.push(ix);
}
