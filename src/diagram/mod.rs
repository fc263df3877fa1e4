//! Diagrams of deployed processes, for the web console (and any BPMN tool):
//! BPMN 2.0 XML with diagram interchange (DI), so one renderer (bpmn-js in
//! the console) draws every dialect.
//!
//! A BPMN definition whose DI places every node of the process is answered
//! as written (drawn as its author drew it). Anything else — BPMN without
//! (complete) DI, HX, the States language — is exported from the IR and laid
//! out by [`layout`]: the exporter reads only the [`Process`], never the
//! dialect, like everything past the loaders (but for the end events an
//! HX flow has none of, drawn after each node ending a path: [`ends`]).
//!
//! Invariants:
//! - the export is well-formed XML whatever the ids and names hold (every
//!   value escaped, control characters replaced); element ids are XML
//!   names — an IR id that is not one (a States-language state name with a
//!   space) gets a generated id, and the IR id always travels in the
//!   `sutra:node` attribute, which the console maps overlays by;
//! - every node and flow of the process appears, with a shape or an edge.

mod ends;
pub mod layout;
mod route;

use crate::model::{
    BoundaryTrigger, CatchTrigger, EndKind, FlowKind, Node, NodeKind, Process, StartTrigger,
    TaskImpl,
};
use std::collections::HashSet;
use std::fmt::Write;

/// The namespace of the `sutra:node` attribute.
pub const SUTRA_NS: &str = "https://sutra.dev/diagram/1.0";

/// The longest condition drawn on a flow (a longer one is cut with "…").
const FLOW_LABEL_MAX: usize = 60;

/// A process's diagram.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagram {
    /// BPMN 2.0 XML with DI.
    pub xml: String,
    /// `true`: exported from the IR and laid out; `false`: the definition as deployed.
    pub generated: bool,
}

/// The diagram of `process`, which was loaded from `source`.
pub fn diagram(source: &str, process: &Process) -> Diagram {
    if has_complete_di(source, process) {
        Diagram {
            xml: source.to_string(),
            generated: false,
        }
    } else {
        Diagram {
            xml: export(process),
            generated: true,
        }
    }
}

/// Whether `source` is XML whose `BPMNShape`s place every node of `process`.
pub fn has_complete_di(source: &str, process: &Process) -> bool {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(source);
    let mut placed: HashSet<String> = HashSet::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) => {
                if e.local_name().as_ref() != b"BPMNShape" {
                    continue;
                }
                for a in e.attributes().flatten() {
                    if a.key.local_name().as_ref() == b"bpmnElement" {
                        if let Ok(v) = a.unescape_value() {
                            placed.insert(v.into_owned());
                        }
                    }
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    // Ids with `#` are the loader's synthetic nodes (an implicit start, the
    // layers of a multi-instance or loop activity): no XML id holds one, and
    // the author's shape of the activity stands for them.
    !process.nodes.is_empty()
        && process
            .nodes
            .iter()
            .all(|n| n.id.contains('#') || placed.contains(&n.id))
}

/// A pass node with nothing to set is drawn as an intermediate (none) event, else as a task.
pub(crate) fn pass_is_event(node: &Node) -> bool {
    matches!(node.kind, NodeKind::Pass { set: None }) && node.data.is_none()
}

fn is_xml_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && s.len() <= 200
}

/// Text safe in an XML attribute or element.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || matches!(c, '\u{FFFE}' | '\u{FFFF}') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Unique XML ids for nodes and flows: the IR id where it is one, else generated.
struct Ids {
    nodes: Vec<String>,
    flows: Vec<String>,
    process: String,
}

impl Ids {
    fn of(p: &Process) -> Ids {
        let mut used: HashSet<String> = ["sutra_definitions", "sutra_diagram", "sutra_plane"]
            .into_iter()
            .map(String::from)
            .collect();
        let mut pick = |wanted: &str, fallback: String| {
            let mut id = if is_xml_name(wanted) && !used.contains(wanted) {
                wanted.to_string()
            } else {
                fallback
            };
            while used.contains(&id) {
                id.push('_');
            }
            used.insert(id.clone());
            id
        };
        let process = pick(&p.id, "sutra_process".into());
        let nodes = p
            .nodes
            .iter()
            .map(|n| pick(&n.id, format!("node_{}", n.ix.0)))
            .collect();
        let flows = p
            .flows
            .iter()
            .map(|f| pick(&f.id, format!("flow_{}", f.ix.0)))
            .collect();
        Ids {
            nodes,
            flows,
            process,
        }
    }
}

/// Export `p` as BPMN 2.0 XML with a generated layout.
pub fn export(p: &Process) -> String {
    // HX: with an end event after each node that ends a path.
    let drawn = ends::drawn(p);
    let p: &Process = &drawn;
    let ids = Ids::of(p);
    let lay = layout::layout(p);
    let mut x = String::new();
    x.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<bpmn:definitions xmlns:bpmn=\"http://www.omg.org/spec/BPMN/20100524/MODEL\" \
         xmlns:bpmndi=\"http://www.omg.org/spec/BPMN/20100524/DI\" \
         xmlns:dc=\"http://www.omg.org/spec/DD/20100524/DC\" \
         xmlns:di=\"http://www.omg.org/spec/DD/20100524/DI\" \
         xmlns:sutra=\"{SUTRA_NS}\" id=\"sutra_definitions\" \
         targetNamespace=\"https://sutra.dev/diagram\" exporter=\"sutra\">"
    );
    let _ = write!(x, "  <bpmn:process id=\"{}\"", esc(&ids.process));
    if let Some(name) = &p.name {
        let _ = write!(x, " name=\"{}\"", esc(name));
    }
    let _ = writeln!(
        x,
        " isExecutable=\"{}\" sutra:node=\"{}\">",
        p.executable,
        esc(&p.id)
    );
    scope(p, &ids, None, 2, &mut x);
    x.push_str("  </bpmn:process>\n");
    let _ = writeln!(
        x,
        "  <bpmndi:BPMNDiagram id=\"sutra_diagram\">\n    <bpmndi:BPMNPlane id=\"sutra_plane\" bpmnElement=\"{}\">",
        esc(&ids.process)
    );
    for n in &p.nodes {
        let b = lay.nodes[n.ix.0 as usize];
        let id = &ids.nodes[n.ix.0 as usize];
        let expanded = if matches!(
            n.kind,
            NodeKind::SubProcess | NodeKind::Fanout(_) | NodeKind::EventSubProcess { .. }
        ) {
            " isExpanded=\"true\""
        } else {
            ""
        };
        let _ = writeln!(
            x,
            "      <bpmndi:BPMNShape id=\"{id}_di\" bpmnElement=\"{id}\"{expanded}><dc:Bounds x=\"{:.0}\" y=\"{:.0}\" width=\"{:.0}\" height=\"{:.0}\"/></bpmndi:BPMNShape>",
            b.x, b.y, b.w, b.h
        );
    }
    for f in &p.flows {
        let id = &ids.flows[f.ix.0 as usize];
        let _ = write!(
            x,
            "      <bpmndi:BPMNEdge id=\"{id}_di\" bpmnElement=\"{id}\">"
        );
        for (px, py) in &lay.flows[f.ix.0 as usize] {
            let _ = write!(x, "<di:waypoint x=\"{px:.0}\" y=\"{py:.0}\"/>");
        }
        x.push_str("</bpmndi:BPMNEdge>\n");
    }
    x.push_str("    </bpmndi:BPMNPlane>\n  </bpmndi:BPMNDiagram>\n</bpmn:definitions>\n");
    x
}

/// The scope of a flow: where its source (a boundary: its host) sits.
fn flow_scope(p: &Process, f: &crate::model::Flow) -> Option<crate::model::NodeIx> {
    p.node(f.source).scope
}

/// Write the members of one scope, then its flows.
fn scope(
    p: &Process,
    ids: &Ids,
    within: Option<crate::model::NodeIx>,
    depth: usize,
    x: &mut String,
) {
    let pad = "  ".repeat(depth);
    for n in p.nodes.iter().filter(|n| n.scope == within) {
        element(p, ids, n, depth, x);
    }
    for f in p.flows.iter().filter(|f| flow_scope(p, f) == within) {
        let id = &ids.flows[f.ix.0 as usize];
        let src = &ids.nodes[f.source.0 as usize];
        let tgt = &ids.nodes[f.target.0 as usize];
        match f.kind {
            FlowKind::Compensation => {
                let _ = writeln!(
                    x,
                    "{pad}<bpmn:association id=\"{id}\" associationDirection=\"One\" sourceRef=\"{src}\" targetRef=\"{tgt}\" sutra:node=\"{}\"/>",
                    esc(&f.id)
                );
            }
            FlowKind::Sequence | FlowKind::Error => {
                // A flow says when it is taken: its condition (a Choice
                // rule in words), `default`, or `on error`.
                let is_default = matches!(
                    &p.node(f.source).kind,
                    NodeKind::ExclusiveGateway { default: Some(d) } if *d == f.ix
                );
                let label = match (&f.kind, &f.condition) {
                    (FlowKind::Error, _) => Some("on error".to_string()),
                    (_, Some(c)) => Some(c.label(FLOW_LABEL_MAX)),
                    _ if is_default => Some("default".to_string()),
                    _ => None,
                };
                let name = label
                    .map(|l| format!(" name=\"{}\"", esc(&l)))
                    .unwrap_or_default();
                let _ = writeln!(
                    x,
                    "{pad}<bpmn:sequenceFlow id=\"{id}\"{name} sourceRef=\"{src}\" targetRef=\"{tgt}\" sutra:node=\"{}\"/>",
                    esc(&f.id)
                );
            }
        }
    }
}

/// The definitions of a throw: its first one's kind (a diagram shows one).
fn throw_definitions(t: &[crate::model::Throw]) -> &'static str {
    match t.first() {
        Some(crate::model::Throw::Signal { .. }) => "<bpmn:signalEventDefinition/>",
        _ => "<bpmn:messageEventDefinition/>",
    }
}

/// What a person reads for a container the loaders made (its id has a
/// `#` part): a States-language Parallel branch `X#branch2` is "X ·
/// branch 2", a Map's iteration `X#iteration` "X · each item", a BPMN
/// repeated activity's body `A#body` A itself (its marker says it repeats)
/// and one iteration `A#instance` "A · each iteration" — X and A by their
/// names when they have one. Anything else: no label of its own.
fn internal_label(p: &Process, id: &str) -> Option<String> {
    let (base, part) = id.rsplit_once('#')?;
    let named = p
        .nodes
        .iter()
        .find(|m| m.id == base)
        .and_then(|m| m.name.clone())
        .unwrap_or_else(|| base.to_string());
    if let Some(k) = part.strip_prefix("branch").filter(|k| !k.is_empty()) {
        return k
            .chars()
            .all(|c| c.is_ascii_digit())
            .then(|| format!("{named} \u{b7} branch {k}"));
    }
    match part {
        "iteration" => Some(format!("{named} \u{b7} each item")),
        "body" => Some(named),
        "instance" => Some(format!("{named} \u{b7} each iteration")),
        _ => None,
    }
}

/// One node as a BPMN element (containers with their members inside).
fn element(p: &Process, ids: &Ids, n: &Node, depth: usize, x: &mut String) {
    let pad = "  ".repeat(depth);
    let id = &ids.nodes[n.ix.0 as usize];
    let task_label = || {
        n.name
            .clone()
            .or_else(|| internal_label(p, &n.id))
            .unwrap_or_else(|| n.id.clone())
    };
    let (tag, label, attrs, inner): (&str, Option<String>, String, String) = match &n.kind {
        NodeKind::Start(t) => {
            let def = match t {
                StartTrigger::None => "",
                StartTrigger::Timer(_) => "<bpmn:timerEventDefinition/>",
                StartTrigger::Message { .. } | StartTrigger::Source { .. } => {
                    "<bpmn:messageEventDefinition/>"
                }
                StartTrigger::Error { .. } => "<bpmn:errorEventDefinition/>",
                StartTrigger::Escalation { .. } => "<bpmn:escalationEventDefinition/>",
                StartTrigger::Condition(_) => "<bpmn:conditionalEventDefinition/>",
                StartTrigger::Signal { .. } => "<bpmn:signalEventDefinition/>",
            };
            ("startEvent", n.name.clone(), String::new(), def.into())
        }
        NodeKind::End(e) => {
            let def = match e {
                EndKind::None => "",
                EndKind::Error { .. } => "<bpmn:errorEventDefinition/>",
                EndKind::Terminate => "<bpmn:terminateEventDefinition/>",
                EndKind::Escalation { .. } => "<bpmn:escalationEventDefinition/>",
                EndKind::Compensate(_) => "<bpmn:compensateEventDefinition/>",
                EndKind::Throw(t) => throw_definitions(t),
            };
            let label = n.name.clone().or_else(|| match e {
                EndKind::Error { code, .. } => Some(code.clone()),
                _ => None,
            });
            ("endEvent", label, String::new(), def.into())
        }
        NodeKind::ServiceTask(t) => {
            let compensator = p
                .flows
                .iter()
                .any(|f| f.target == n.ix && f.kind == FlowKind::Compensation);
            let mut attrs = match &t.implementation {
                TaskImpl::Registered(m) => format!(" sutra:task=\"registered:{}\"", esc(m)),
                TaskImpl::Channel(c) => format!(" sutra:task=\"channel:{}\"", esc(c)),
                TaskImpl::Http(h) => format!(" sutra:task=\"http:{}\"", esc(&h.method)),
            };
            if compensator {
                attrs.push_str(" isForCompensation=\"true\"");
            }
            ("serviceTask", Some(task_label()), attrs, String::new())
        }
        NodeKind::ExclusiveGateway { default } => {
            let attrs = default
                .map(|f| format!(" default=\"{}\"", ids.flows[f.0 as usize]))
                .unwrap_or_default();
            ("exclusiveGateway", n.name.clone(), attrs, String::new())
        }
        NodeKind::EventGateway => (
            "eventBasedGateway",
            n.name.clone(),
            String::new(),
            String::new(),
        ),
        NodeKind::Throw(t) => (
            "intermediateThrowEvent",
            Some(task_label()),
            String::new(),
            throw_definitions(t).into(),
        ),
        NodeKind::ParallelGateway => (
            "parallelGateway",
            n.name.clone(),
            String::new(),
            String::new(),
        ),
        NodeKind::InclusiveGateway => (
            "inclusiveGateway",
            n.name.clone(),
            String::new(),
            String::new(),
        ),
        NodeKind::Catch(c) => {
            let def = match c {
                CatchTrigger::Timer(_) | CatchTrigger::TimerFrom(_) => {
                    "<bpmn:timerEventDefinition/>"
                }
                CatchTrigger::Message(_) => "<bpmn:messageEventDefinition/>",
                CatchTrigger::Condition(_) => "<bpmn:conditionalEventDefinition/>",
                CatchTrigger::Signal { .. } => "<bpmn:signalEventDefinition/>",
                CatchTrigger::Any(_) => {
                    "<bpmn:messageEventDefinition/><bpmn:timerEventDefinition/>"
                }
            };
            (
                "intermediateCatchEvent",
                Some(task_label()),
                String::new(),
                def.into(),
            )
        }
        NodeKind::Boundary(b) => {
            let def = match &b.trigger {
                BoundaryTrigger::Error { .. } => "<bpmn:errorEventDefinition/>",
                BoundaryTrigger::Timer(_) => "<bpmn:timerEventDefinition/>",
                BoundaryTrigger::Message(_) => "<bpmn:messageEventDefinition/>",
                BoundaryTrigger::Escalation { .. } => "<bpmn:escalationEventDefinition/>",
                BoundaryTrigger::Condition(_) => "<bpmn:conditionalEventDefinition/>",
                BoundaryTrigger::Compensation => "<bpmn:compensateEventDefinition/>",
                BoundaryTrigger::Signal { .. } => "<bpmn:signalEventDefinition/>",
            };
            let attrs = format!(
                " attachedToRef=\"{}\" cancelActivity=\"{}\"",
                ids.nodes[b.attached_to.0 as usize], b.interrupting
            );
            ("boundaryEvent", n.name.clone(), attrs, def.into())
        }
        NodeKind::SubProcess => (
            "subProcess",
            Some(task_label()),
            String::new(),
            String::new(),
        ),
        NodeKind::Fanout(f) => {
            let inner = match f.repeat.as_deref() {
                Some(r) if !r.scoped() => "<bpmn:standardLoopCharacteristics/>",
                Some(r) if r.max_concurrency == 1 => {
                    "<bpmn:multiInstanceLoopCharacteristics isSequential=\"true\"/>"
                }
                Some(_) => "<bpmn:multiInstanceLoopCharacteristics/>",
                None if f.items.is_some() => "<bpmn:multiInstanceLoopCharacteristics/>",
                None => "",
            };
            (
                "subProcess",
                Some(task_label()),
                String::new(),
                inner.into(),
            )
        }
        NodeKind::Pass { .. } if pass_is_event(n) => (
            "intermediateThrowEvent",
            n.name.clone(),
            String::new(),
            String::new(),
        ),
        NodeKind::Pass { .. } => ("task", Some(task_label()), String::new(), String::new()),
        NodeKind::CallProcess { process, .. } => (
            "callActivity",
            Some(task_label()),
            format!(" calledElement=\"{}\"", esc(process)),
            String::new(),
        ),
        NodeKind::Escalate { .. } => (
            "intermediateThrowEvent",
            n.name.clone(),
            String::new(),
            "<bpmn:escalationEventDefinition/>".into(),
        ),
        NodeKind::Compensate(_) => (
            "intermediateThrowEvent",
            n.name.clone(),
            String::new(),
            "<bpmn:compensateEventDefinition/>".into(),
        ),
        NodeKind::EventSubProcess { .. } => (
            "subProcess",
            Some(task_label()),
            " triggeredByEvent=\"true\"".into(),
            String::new(),
        ),
    };
    // A States-language state's id, and an HX node's, is the name its
    // author gave it: shown when the node has no other (a Choice, a
    // Succeed); a BPMN id (often a modeler's GUID) and an internal one
    // (`Reserve#catch1`) are not.
    let label = label.or_else(|| {
        (p.dialect != crate::model::Dialect::Bpmn && !n.id.contains('#')).then(|| n.id.clone())
    });
    let _ = write!(x, "{pad}<bpmn:{tag} id=\"{id}\"");
    if let Some(l) = label {
        let _ = write!(x, " name=\"{}\"", esc(&l));
    }
    let _ = write!(x, " sutra:node=\"{}\"{attrs}>", esc(&n.id));
    x.push_str(&inner);
    if matches!(
        n.kind,
        NodeKind::SubProcess | NodeKind::Fanout(_) | NodeKind::EventSubProcess { .. }
    ) {
        x.push('\n');
        scope(p, ids, Some(n.ix), depth + 1, x);
        x.push_str(&pad);
    }
    let _ = writeln!(x, "</bpmn:{tag}>");
}

#[cfg(test)]
mod layout_check;
#[cfg(test)]
mod tests;
