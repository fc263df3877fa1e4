//! The layout's promise, checked on every diagram it can generate (issue 35
//! item 1): no flow runs through a shape it does not connect. For each
//! process the loaders accept among `examples/`, the test fixtures and the
//! conformance corpora (their copies inside the repository), every segment
//! of every flow is tested against every node's bounds but its source's,
//! its target's, their containers' and (for a boundary event) its host's.

use super::layout::{layout, Bounds};
use crate::model::{NodeIx, NodeKind, Process};
use std::path::Path;

/// Every definition file under `dir` (recursively) a loader may read.
fn definitions(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            definitions(&p, out);
        } else {
            let name = p.to_string_lossy();
            let wanted = name.ends_with(".bpmn")
                || name.ends_with(".bpmn.xml")
                || name.ends_with(".hx.xml")
                || name.ends_with(".asl.json");
            if wanted {
                out.push(p);
            }
        }
    }
}

/// The containers of `ix`, innermost first.
fn ancestors(p: &Process, ix: NodeIx) -> Vec<NodeIx> {
    let mut out = Vec::new();
    let mut at = p.node(ix).scope;
    while let Some(s) = at {
        if out.contains(&s) || (s.0 as usize) >= p.nodes.len() {
            break;
        }
        out.push(s);
        at = p.node(s).scope;
    }
    out
}

/// Whether the segment `a`-`b` passes through the inside of `r` (touching
/// its border is not crossing it).
fn crosses(a: (f64, f64), b: (f64, f64), r: &Bounds) -> bool {
    const IN: f64 = 1.0;
    let (x0, y0, x1, y1) = (r.x + IN, r.y + IN, r.x + r.w - IN, r.y + r.h - IN);
    if x1 <= x0 || y1 <= y0 {
        return false;
    }
    // Liang-Barsky clipping of the segment against the shrunk rectangle.
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [
        (-dx, a.0 - x0),
        (dx, x1 - a.0),
        (-dy, a.1 - y0),
        (dy, y1 - a.1),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return false;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    t0 < t1
}

/// Every flow of `p` that runs through a shape it does not connect:
/// (flow id, node id).
pub(super) fn violations(p: &Process) -> Vec<(String, String)> {
    // What is drawn: an HX process with its end events.
    let drawn = super::ends::drawn(p);
    let p: &Process = &drawn;
    let l = layout(p);
    let mut out = Vec::new();
    for f in &p.flows {
        let mut exempt = vec![f.source, f.target];
        for end in [f.source, f.target] {
            exempt.extend(ancestors(p, end));
            if let NodeKind::Boundary(b) = &p.node(end).kind {
                exempt.push(b.attached_to);
            }
        }
        let points = &l.flows[f.ix.0 as usize];
        for node in &p.nodes {
            if exempt.contains(&node.ix) {
                continue;
            }
            let r = &l.nodes[node.ix.0 as usize];
            if points.windows(2).any(|w| crosses(w[0], w[1], r)) {
                out.push((f.id.clone(), node.id.clone()));
            }
        }
    }
    out
}

#[test]
fn no_generated_flow_runs_through_a_shape_it_does_not_connect() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "tests/fixtures", "tests/corpora"] {
        definitions(&root.join(dir), &mut files);
    }
    let (mut drawn, mut bad) = (0, Vec::new());
    for path in &files {
        let Ok(source) = std::fs::read_to_string(path) else {
            continue;
        };
        let loaded = crate::dialect::load(&source);
        if !loaded.ok() {
            continue;
        }
        for p in &loaded.definitions.processes {
            drawn += 1;
            for (flow, node) in violations(p) {
                bad.push(format!(
                    "{}: process {}: flow {flow} runs through {node}",
                    path.strip_prefix(root).unwrap_or(path).display(),
                    p.id
                ));
            }
        }
    }
    assert!(drawn > 100, "only {drawn} processes drawn");
    assert!(bad.is_empty(), "{} of them:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn a_segment_crosses_what_it_passes_through_not_what_it_touches() {
    let r = Bounds {
        x: 10.0,
        y: 10.0,
        w: 10.0,
        h: 10.0,
    };
    assert!(crosses((0.0, 15.0), (30.0, 15.0), &r));
    assert!(crosses((15.0, 0.0), (15.0, 12.0), &r));
    assert!(
        !crosses((0.0, 10.0), (30.0, 10.0), &r),
        "along its top edge"
    );
    assert!(
        !crosses((0.0, 15.0), (10.0, 15.0), &r),
        "ending on its left edge"
    );
    assert!(!crosses((0.0, 0.0), (30.0, 5.0), &r));
}
