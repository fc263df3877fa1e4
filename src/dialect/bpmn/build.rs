//! Elements → IR: one [`Process`] per `<process>`, nodes and flows by index.
//!
//! Invariant: whatever the input, the process built satisfies the `model`
//! invariants. A flow whose ends cannot be resolved is dropped (after a
//! diagnostic); a boundary event that cannot be attached, and an element Sutra
//! cannot execute, become opaque placeholders (see the parent module docs).
//! Diagnostics name the element (`tag `id``) and carry its position.

use super::events::{self, Def, Globals};
use super::ext::{self, describe};
use super::validate;
use super::xml::{Document, Element, Ns, BPMN_NS};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::{
    BoundaryTrigger, CatchTrigger, Definitions, Dialect, EndKind, Flow, Node, NodeIx, NodeKind,
    Process, ServiceTask, StartTrigger, TaskImpl,
};
use crate::time::{IsoDuration, TimerSpec};
use std::collections::{HashMap, HashSet};

mod call;
mod compensate;
mod escalation;
mod event_gateway;
mod event_sub;
mod link;
mod message;
mod repeat;
mod resolve;
mod signal;

/// Flow-node-like BPMN elements Sutra does not execute, with a hint.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "task",
        "use a serviceTask with implementation=\"registered:<name>\" or \"channel:<name>\"",
    ),
    (
        "userTask",
        "Sutra has no human tasks; use a channel-call serviceTask",
    ),
    ("manualTask", "Sutra has no manual tasks"),
    ("scriptTask", "use a registered serviceTask"),
    ("businessRuleTask", "use a registered serviceTask"),
    ("complexGateway", "complex gateways are not supported"),
    ("transaction", "transactions are not supported"),
    ("adHocSubProcess", "ad-hoc sub-processes are not supported"),
    ("callChoreography", "choreographies are not executable"),
    ("choreographyTask", "choreographies are not executable"),
    ("subChoreography", "choreographies are not executable"),
    (
        "implicitThrowEvent",
        "implicit throw events are not supported",
    ),
];

/// BPMN elements inside a process that do not execute: ignored.
const IGNORED: &[&str] = &[
    "laneSet",
    "lane",
    "textAnnotation",
    "association",
    "group",
    "dataObject",
    "dataObjectReference",
    "dataStoreReference",
    "dataInput",
    "dataOutput",
    "dataInputAssociation",
    "dataOutputAssociation",
    "documentation",
    "extensionElements",
    "ioSpecification",
    "property",
    "category",
    "categoryValue",
    "auditing",
    "monitoring",
    "resourceRole",
    "performer",
    "humanPerformer",
    "potentialOwner",
    "supportedInterfaceRef",
    // A sub-process's own children that are not part of its content:
    "incoming",
    "outgoing",
    "standardLoopCharacteristics",
    "multiInstanceLoopCharacteristics",
];

/// Load every process of a parsed document.
pub fn definitions(doc: &Document) -> (Definitions, Vec<Diagnostic>) {
    let root = &doc.root;
    let mut diags = Vec::new();
    let mut processes = Vec::new();
    if !root.is(Ns::Bpmn, "definitions") {
        let uri = doc.namespace_uri(root.ns);
        let ns = if uri.is_empty() {
            "no namespace".to_string()
        } else {
            format!("namespace `{uri}`")
        };
        diags.push(
            Diagnostic::error(
                Code::BpmnNotDefinitions,
                format!(
                    "root element `<{}>` ({ns}) is not a BPMN <definitions> in namespace `{BPMN_NS}`",
                    root.qname
                ),
            )
            .at(root.pos)
            .element(root.label()),
        );
        return (Definitions { processes }, diags);
    }
    duplicate_ids(root, &mut diags);
    let globals = Globals::collect(root);
    for el in root.bpmn_children().filter(|c| c.local == "process") {
        let executable = match el.attr("isExecutable").map(str::trim) {
            Some("true") | Some("1") => true,
            None | Some("false") | Some("0") => false,
            Some(v) => {
                diags.push(
                    Diagnostic::error(
                        Code::BpmnInvalidAttribute,
                        format!(
                            "isExecutable=\"{v}\" on {}: must be `true` or `false`",
                            describe(el)
                        ),
                    )
                    .at(el.pos)
                    .element(el.label()),
                );
                false
            }
        };
        let mut b = Builder::new(&globals, executable);
        b.shared = events::shared_definitions(root);
        let process = b.process(el);
        if executable {
            diags.extend(b.diags);
            ext::q_attributes(el, &mut diags);
            diags.extend(validate::structure(&process, &b.opaque));
        } else {
            let why = if el.attr("isExecutable").is_some() {
                "isExecutable=\"false\""
            } else {
                "no isExecutable=\"true\""
            };
            diags.push(
                Diagnostic::info(
                    Code::BpmnNotExecutable,
                    format!(
                        "{} is not executable ({why}): loaded for inspection only, not checked further",
                        describe(el)
                    ),
                )
                .at(el.pos)
                .element(el.label()),
            );
        }
        processes.push(process);
    }
    if processes.is_empty() {
        diags.push(
            Diagnostic::error(Code::BpmnNoProcess, "the definitions hold no <process>")
                .at(root.pos)
                .element(root.label()),
        );
    }
    (Definitions { processes }, diags)
}

/// Ids are unique per document (BPMN-namespace elements; DI has its own).
fn duplicate_ids(root: &Element, diags: &mut Vec<Diagnostic>) {
    let mut seen: HashMap<&str, (u32, u32)> = HashMap::new();
    let mut stack = vec![root];
    let mut order = Vec::new();
    while let Some(el) = stack.pop() {
        order.push(el);
        stack.extend(el.children.iter().rev().filter(|c| c.ns == Ns::Bpmn));
    }
    for el in order {
        let Some(id) = el.id() else { continue };
        if let Some((line, column)) = seen.get(id) {
            diags.push(
                Diagnostic::error(
                    Code::BpmnDuplicateId,
                    format!(
                        "id `{id}` of {} is already used at {line}:{column}",
                        el.local
                    ),
                )
                .at(el.pos)
                .element(id),
            );
        } else {
            seen.insert(id, (el.pos.line, el.pos.column));
        }
    }
}

struct PendingBoundary<'d> {
    ix: NodeIx,
    el: &'d Element,
    interrupting: bool,
    trigger: BoundaryTrigger,
}

struct Builder<'d> {
    globals: &'d Globals,
    executable: bool,
    nodes: Vec<Node>,
    /// The element of each node (same index).
    elements: Vec<&'d Element>,
    flows: Vec<Flow>,
    flow_elements: Vec<&'d Element>,
    opaque: HashSet<NodeIx>,
    node_of: HashMap<&'d str, NodeIx>,
    pending_flows: Vec<(&'d Element, Option<NodeIx>)>,
    /// The ids of every sequenceFlow element, kept in the IR or not.
    flow_ids: HashSet<&'d str>,
    pending_boundaries: Vec<PendingBoundary<'d>>,
    pending_defaults: Vec<NodeIx>,
    /// Compensation: associations, compensate throws naming an
    /// `activityRef`, handlers (`isForCompensation`) (build/compensate.rs).
    pending_associations: Vec<&'d Element>,
    pending_compensate: Vec<(NodeIx, &'d Element)>,
    for_compensation: Vec<NodeIx>,
    /// The root-level event definitions an `eventDefinitionRef` names.
    shared: HashMap<&'d str, &'d Element>,
    /// Link events, joined once the flows exist (build/link.rs).
    links: Vec<link::LinkEnd<'d>>,
    diags: Vec<Diagnostic>,
}

fn err(code: Code, el: &Element, message: String) -> Diagnostic {
    Diagnostic::error(code, message)
        .at(el.pos)
        .element(el.label())
}

fn attr_ref<'e>(el: &'e Element, attr: &str) -> Option<&'e str> {
    el.attr(attr).map(str::trim).filter(|s| !s.is_empty())
}

impl<'d> Builder<'d> {
    fn new(globals: &'d Globals, executable: bool) -> Self {
        Builder {
            globals,
            executable,
            nodes: Vec::new(),
            elements: Vec::new(),
            flows: Vec::new(),
            flow_elements: Vec::new(),
            opaque: HashSet::new(),
            node_of: HashMap::new(),
            pending_flows: Vec::new(),
            flow_ids: HashSet::new(),
            pending_boundaries: Vec::new(),
            pending_defaults: Vec::new(),
            pending_associations: Vec::new(),
            pending_compensate: Vec::new(),
            for_compensation: Vec::new(),
            shared: HashMap::new(),
            links: Vec::new(),
            diags: Vec::new(),
        }
    }

    fn process(&mut self, el: &'d Element) -> Process {
        if el.id().is_none() {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                el,
                "a <process> needs an `id`".into(),
            ));
        }
        self.foreign(el);
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &["businessKey"], el, &mut self.diags);
        let business_key = ext::single(&qs, "businessKey", el, &mut self.diags)
            .and_then(|q| ext::business_key(q, el, &mut self.diags));
        self.scope(el, None);
        self.resolve();
        self.resolve_compensation();
        self.resolve_links();
        self.check_event_gateways();
        self.implicit_starts(el);
        let mut p = Process {
            id: el.id().unwrap_or_default().to_string(),
            name: el.attr("name").map(str::to_string),
            executable: self.executable,
            dialect: Dialect::Bpmn,
            pos: el.pos,
            nodes: std::mem::take(&mut self.nodes),
            flows: std::mem::take(&mut self.flows),
            business_key,
            by_id: HashMap::new(),
        };
        super::http::route_failures(&mut p);
        p.index();
        p
    }

    fn foreign(&mut self, el: &Element) {
        if self.executable {
            self.diags.extend(ext::foreign(el));
        }
    }

    /// The children of a process or sub-process.
    fn scope(&mut self, container: &'d Element, scope: Option<NodeIx>) {
        for child in &container.children {
            match child.ns {
                Ns::Bpmn => self.element(child, scope),
                Ns::Q => self.diags.push(err(
                    Code::BpmnUnsupportedElement,
                    child,
                    format!(
                        "q:{} must be written inside <extensionElements>",
                        child.local
                    ),
                )),
                // Foreign children were reported with their container.
                _ => {}
            }
        }
    }

    fn element(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        match el.local.as_str() {
            "sequenceFlow" => {
                if let Some(id) = el.id() {
                    self.flow_ids.insert(id);
                }
                self.pending_flows.push((el, scope));
            }
            "startEvent" => self.start(el, scope),
            "endEvent" => self.end(el, scope),
            "serviceTask" => self.activity(el, scope, |b, s| Some(b.service_task(el, s))),
            "callActivity" => self.activity(el, scope, |b, s| b.call_activity(el, s)),
            "exclusiveGateway" => {
                self.no_q(el);
                let ix = self.node(el, scope, NodeKind::ExclusiveGateway { default: None });
                if el.attr("default").is_some() {
                    self.pending_defaults.push(ix);
                }
            }
            "parallelGateway" => {
                self.no_q(el);
                self.node(el, scope, NodeKind::ParallelGateway);
            }
            "inclusiveGateway" => {
                self.no_q(el);
                let ix = self.node(el, scope, NodeKind::InclusiveGateway);
                if el.attr("default").is_some() {
                    self.pending_defaults.push(ix);
                }
            }
            "receiveTask" => self.receive_task(el, scope),
            "sendTask" => self.send_task(el, scope),
            "eventBasedGateway" => self.event_gateway(el, scope),
            "intermediateCatchEvent" => self.catch(el, scope),
            "intermediateThrowEvent" => self.throw(el, scope),
            "boundaryEvent" => self.boundary(el, scope),
            "subProcess" if el.attr("triggeredByEvent").map(str::trim) == Some("true") => {
                self.event_sub(el, scope)
            }
            "association" => self.pending_associations.push(el),
            "transaction" => self.refuse_transaction(el, scope),
            "subProcess" => self.activity(el, scope, |b, s| {
                b.no_q(el);
                let ix = b.node(el, s, NodeKind::SubProcess);
                if el.attr("default").is_some() {
                    b.pending_defaults.push(ix);
                }
                b.scope(el, Some(ix));
                Some(ix)
            }),
            tag => {
                if let Some((_, hint)) = UNSUPPORTED.iter().find(|(t, _)| *t == tag) {
                    self.unsupported(el, scope, hint.to_string());
                } else if !IGNORED.contains(&tag) {
                    self.unsupported(el, scope, "Sutra does not know this element".into());
                }
            }
        }
    }

    /// Append a node; returns its index. `common` runs the per-element checks.
    fn push_node(&mut self, el: &'d Element, scope: Option<NodeIx>, kind: NodeKind) -> NodeIx {
        let ix = NodeIx(self.nodes.len() as u32);
        let id = el.id().unwrap_or_default();
        if !id.is_empty() {
            match self.node_of.entry(id) {
                // A duplicate id (reported document-wide): the first element
                // keeps the id, this one stands aside as opaque.
                std::collections::hash_map::Entry::Occupied(_) => {
                    self.opaque.insert(ix);
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(ix);
                }
            }
        }
        self.nodes.push(Node {
            ix,
            id: id.to_string(),
            name: el.attr("name").map(str::to_string),
            pos: el.pos,
            scope,
            kind,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            boundaries: Vec::new(),
            join: None,
            data: None,
        });
        self.elements.push(el);
        ix
    }

    /// A supported node: appended, with the checks every flow node gets.
    fn node(&mut self, el: &'d Element, scope: Option<NodeIx>, kind: NodeKind) -> NodeIx {
        if el.id().is_none() {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                el,
                format!("{} needs an `id`", describe(el)),
            ));
        }
        self.foreign(el);
        // Activities read their loop characteristics themselves (build/repeat.rs).
        let activity = matches!(
            el.local.as_str(),
            "serviceTask" | "subProcess" | "callActivity"
        );
        for c in el.bpmn_children() {
            if !activity
                && matches!(
                    c.local.as_str(),
                    "standardLoopCharacteristics" | "multiInstanceLoopCharacteristics"
                )
            {
                self.diags.push(err(
                    Code::BpmnUnsupportedElement,
                    c,
                    format!(
                        "{} on {} is not supported (loops and multi-instance)",
                        c.local,
                        describe(el)
                    ),
                ));
            }
        }
        self.quantities(el);
        let handler = el.attr("isForCompensation").map(str::trim) == Some("true");
        let ix = self.push_node(el, scope, kind);
        if handler {
            self.compensation_handler(el, ix);
        }
        ix
    }

    /// `startQuantity` / `completionQuantity` (BPMN: tokens needed to start an
    /// activity, tokens it sends on each outgoing flow). Sutra starts an
    /// activity once per arriving token and sends one token per flow, i.e.
    /// the default 1; any other value is refused rather than ignored.
    fn quantities(&mut self, el: &Element) {
        for attr in ["startQuantity", "completionQuantity"] {
            let Some(raw) = el.attr(attr) else { continue };
            let v = raw.trim();
            match v.parse::<u64>() {
                Ok(1) => {}
                Ok(n) if n > 1 => self.diags.push(err(
                    Code::BpmnUnsupportedElement,
                    el,
                    format!(
                        "{attr}=\"{n}\" on {} is not supported: Sutra starts an activity once per \
                         arriving token and sends one token along each outgoing flow (the default, 1); \
                         model several tokens with a parallel gateway",
                        describe(el)
                    ),
                )),
                _ => self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!(
                        "{attr}=\"{}\" on {}: must be an integer ≥ 1",
                        ext::one_line(v),
                        describe(el)
                    ),
                )),
            }
        }
    }

    /// An element Sutra cannot execute: reported, and an opaque placeholder
    /// stands in for it (when it has an id flows can refer to).
    fn unsupported(&mut self, el: &'d Element, scope: Option<NodeIx>, hint: String) {
        self.diags.push(err(
            Code::BpmnUnsupportedElement,
            el,
            format!("{} cannot be executed by Sutra: {hint}", describe(el)),
        ));
        self.placeholder(el, scope);
    }

    fn placeholder(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if el.id().is_none() {
            return;
        }
        let kind = match el.local.as_str() {
            "startEvent" => NodeKind::Start(StartTrigger::None),
            "endEvent" => NodeKind::End(EndKind::None),
            _ => NodeKind::Pass { set: None },
        };
        let ix = self.push_node(el, scope, kind);
        self.opaque.insert(ix);
    }

    /// An event whose definition Sutra does not support here.
    fn unsupported_def(
        &mut self,
        el: &'d Element,
        scope: Option<NodeIx>,
        def: Def<'_>,
        what: &str,
    ) {
        let at = match def {
            Def::Timer(d)
            | Def::Message(d)
            | Def::Error(d)
            | Def::Terminate(d)
            | Def::Escalation(d)
            | Def::Compensate(d)
            | Def::Conditional(d)
            | Def::Unsupported(d, _) => d,
            Def::None => el,
        };
        self.diags.push(
            err(
                escalation::refusal_code(def),
                at,
                format!(
                    "{} with {} is not supported: {what}",
                    describe(el),
                    def.label()
                ),
            )
            .element(el.label()),
        );
        self.placeholder(el, scope);
    }

    /// An event's definition, a shared one (`eventDefinitionRef`) resolved.
    fn definition(&self, el: &'d Element) -> Def<'d> {
        events::definition_with(el, &self.shared)
    }

    fn no_q(&mut self, el: &Element) {
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &[], el, &mut self.diags);
    }

    fn start(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if self.in_event_sub(scope) {
            // The start of an event sub-process carries its trigger (build/event_sub.rs).
            return self.event_sub_start(el, scope);
        }
        if self.start_ext(el, scope) {
            return;
        }
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &["source"], el, &mut self.diags);
        let source_el = ext::single(&qs, "source", el, &mut self.diags);
        let def = self.definition(el);
        if scope.is_some() {
            if let Some(q) = source_el {
                self.diags.push(err(
                    Code::BpmnUnsupportedElement,
                    q,
                    format!(
                        "q:source on {}: only a process-level start event has a source",
                        describe(el)
                    ),
                ));
            }
            match def {
                Def::None => {
                    self.node(el, scope, NodeKind::Start(StartTrigger::None));
                }
                def @ (Def::Timer(..)
                | Def::Message(..)
                | Def::Error(..)
                | Def::Terminate(..)
                | Def::Escalation(..)
                | Def::Compensate(..)
                | Def::Conditional(..)
                | Def::Unsupported(..)) => self.unsupported_def(
                    el,
                    scope,
                    def,
                    "the start event of an embedded sub-process has no trigger",
                ),
            }
            return;
        }
        let source = source_el.and_then(|q| ext::source(q, el, &mut self.diags));
        let ambiguous = |b: &mut Self, what: &str| {
            if source_el.is_some() {
                b.diags.push(err(
                    Code::BpmnAmbiguousStart,
                    el,
                    format!(
                        "{} has both a q:source and a {what} definition: a start is triggered by one of a \
                         clock, a message or a source, never by two",
                        describe(el)
                    ),
                ));
            }
        };
        let trigger = match def {
            Def::None => match source {
                Some(name) => StartTrigger::Source { name },
                None => StartTrigger::None,
            },
            Def::Timer(d) => {
                ambiguous(self, "timer");
                match events::timer(d, el) {
                    Ok(t) => StartTrigger::Timer(t),
                    Err(e) => {
                        self.diags.push(e);
                        StartTrigger::None
                    }
                }
            }
            Def::Message(d) => {
                ambiguous(self, "message");
                match events::message_name(d, el, self.globals) {
                    Ok(name) => StartTrigger::Message { name },
                    Err(e) => {
                        self.diags.push(e);
                        StartTrigger::None
                    }
                }
            }
            def @ (Def::Error(..)
            | Def::Terminate(..)
            | Def::Escalation(..)
            | Def::Compensate(..)
            | Def::Conditional(..)
            | Def::Unsupported(..)) => {
                return self.unsupported_def(
                    el,
                    scope,
                    def,
                    "a process starts by none, timer, message or q:source (error and escalation start events start event sub-processes)",
                )
            }
        };
        self.node(el, scope, NodeKind::Start(trigger));
    }

    fn end(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if self.end_ext(el, scope) {
            return;
        }
        self.no_q(el);
        let kind = match self.definition(el) {
            Def::None => EndKind::None,
            Def::Terminate(_) => EndKind::Terminate,
            Def::Error(d) => {
                match events::error_code(d, el, self.globals) {
                    Ok(Some((code, message))) => EndKind::Error { code, message },
                    // No errorRef: an unnamed error, which only a catch-all
                    // error boundary (one without errorRef) catches.
                    Ok(None) => EndKind::Error {
                        code: Code::BpmnUnnamedError.as_str().to_string(),
                        message: Some(format!(
                            "error end event `{}` threw an error without errorRef",
                            el.id().unwrap_or_default()
                        )),
                    },
                    Err(e) => {
                        self.diags.push(e);
                        EndKind::None
                    }
                }
            }
            Def::Escalation(d) => EndKind::Escalation {
                code: self.thrown_escalation(d, el),
            },
            Def::Compensate(d) => EndKind::Compensate(self.compensate_throw(d, el)),
            def @ (Def::Timer(..)
            | Def::Message(..)
            | Def::Conditional(..)
            | Def::Unsupported(..)) => return self.unsupported_def(
                el,
                scope,
                def,
                "an end event is none, error, terminate, escalation, compensate, message or signal",
            ),
        };
        let compensates = matches!(kind, EndKind::Compensate(_));
        let ix = self.node(el, scope, NodeKind::End(kind));
        if compensates {
            self.compensate_ref(ix, el);
        }
    }

    fn message_ref(
        &mut self,
        el: &Element,
        def: &Element,
        qs: &[&Element],
    ) -> crate::model::MessageRef {
        let name = match events::message_name(def, el, self.globals) {
            Ok(n) => n,
            Err(e) => {
                self.diags.push(e);
                String::new()
            }
        };
        let correlation_key = ext::single(qs, "correlation", el, &mut self.diags)
            .and_then(|q| ext::correlation(q, el, &mut self.diags));
        crate::model::MessageRef {
            name,
            correlation_key,
            event: false,
        }
    }

    fn timer(&mut self, def: &Element, el: &Element) -> TimerSpec {
        events::timer(def, el).unwrap_or_else(|e| {
            self.diags.push(e);
            TimerSpec::Duration(IsoDuration::ZERO)
        })
    }

    fn catch(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if self.catch_ext(el, scope) {
            return;
        }
        let qs = ext::q_elements(el);
        let def = self.definition(el);
        let allowed: &[&str] = if matches!(def, Def::Message(_)) {
            &["correlation"]
        } else {
            &[]
        };
        ext::misplaced(&qs, allowed, el, &mut self.diags);
        let trigger = match def {
            Def::Timer(d) => CatchTrigger::Timer(self.timer(d, el)),
            Def::Message(d) => CatchTrigger::Message(self.message_ref(el, d, &qs)),
            Def::Conditional(d) => CatchTrigger::Condition(self.event_condition(d, el)),
            Def::None => {
                return self.unsupported(
                    el,
                    scope,
                    "an intermediate catch event needs a timer or message definition".into(),
                )
            }
            def @ (Def::Error(..)
            | Def::Terminate(..)
            | Def::Escalation(..)
            | Def::Compensate(..)
            | Def::Unsupported(..)) => {
                return self.unsupported_def(
                    el,
                    scope,
                    def,
                    "an intermediate catch event waits for a timer, a message or a condition",
                )
            }
        };
        self.node(el, scope, NodeKind::Catch(trigger));
    }

    fn throw(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if self.throw_ext(el, scope) {
            return;
        }
        self.no_q(el);
        match self.definition(el) {
            Def::None => {
                self.node(el, scope, NodeKind::Pass { set: None });
            }
            Def::Escalation(d) => {
                let code = self.thrown_escalation(d, el);
                self.node(el, scope, NodeKind::Escalate { code });
            }
            Def::Compensate(d) => {
                let throw = self.compensate_throw(d, el);
                let ix = self.node(el, scope, NodeKind::Compensate(throw));
                self.compensate_ref(ix, el);
            }
            def @ (Def::Timer(..)
            | Def::Message(..)
            | Def::Error(..)
            | Def::Terminate(..)
            | Def::Conditional(..)
            | Def::Unsupported(..)) => self.unsupported_def(
                el,
                scope,
                def,
                "an intermediate throw event is none, escalation, compensate, message, signal or link",
            ),
        }
    }

    fn boundary(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if self.boundary_ext(el, scope) {
            return;
        }
        let qs = ext::q_elements(el);
        let def = self.definition(el);
        let allowed: &[&str] = if matches!(def, Def::Message(_)) {
            &["correlation"]
        } else {
            &[]
        };
        ext::misplaced(&qs, allowed, el, &mut self.diags);
        let interrupting = match el.attr("cancelActivity").map(str::trim) {
            None | Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(v) => {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!(
                        "cancelActivity=\"{v}\" on {}: must be `true` or `false`",
                        describe(el)
                    ),
                ));
                true
            }
        };
        let trigger = match def {
            Def::Error(d) => {
                if !interrupting {
                    self.diags.push(err(
                        Code::BpmnInvalidAttribute,
                        el,
                        format!("cancelActivity=\"false\" on error boundary {}: an error always interrupts", describe(el)),
                    ));
                }
                let codes = match events::error_code(d, el, self.globals) {
                    Ok(found) => found.map(|(code, _)| vec![code]),
                    Err(e) => {
                        self.diags.push(e);
                        None
                    }
                };
                BoundaryTrigger::Error {
                    codes,
                    result_path: None,
                    catch_failures: false,
                }
            }
            Def::Timer(d) => BoundaryTrigger::Timer(self.timer(d, el)),
            Def::Message(d) => BoundaryTrigger::Message(self.message_ref(el, d, &qs)),
            Def::Escalation(d) => BoundaryTrigger::Escalation {
                codes: self.caught_escalation(d, el),
            },
            Def::Compensate(_) => BoundaryTrigger::Compensation,
            Def::Conditional(d) => BoundaryTrigger::Condition(self.event_condition(d, el)),
            Def::None => {
                return self.unsupported(
                    el,
                    scope,
                    "a boundary event needs an error, timer or message definition".into(),
                )
            }
            def @ (Def::Terminate(..) | Def::Unsupported(..)) => {
                return self.unsupported_def(
                    el,
                    scope,
                    def,
                    "a boundary event catches an error, a timer, a message, an escalation or a condition, or marks a compensation",
                )
            }
        };
        // The kind is set once the activity is resolved (see `resolve_boundaries`).
        let ix = self.node(el, scope, NodeKind::Pass { set: None });
        self.pending_boundaries.push(PendingBoundary {
            ix,
            el,
            interrupting,
            trigger,
        });
    }

    fn service_task(&mut self, el: &'d Element, scope: Option<NodeIx>) -> NodeIx {
        let http = super::http::element(el);
        let implementation = match el.attr("implementation").map(str::trim) {
            _ if http.is_some() => super::http::spec(http.unwrap_or(el), el, &mut self.diags),
            Some(v)
                if v.strip_prefix("registered:")
                    .is_some_and(|n| !n.trim().is_empty()) =>
            {
                TaskImpl::Registered(v["registered:".len()..].trim().to_string())
            }
            Some(v)
                if v.strip_prefix("channel:")
                    .is_some_and(|n| !n.trim().is_empty()) =>
            {
                TaskImpl::Channel(v["channel:".len()..].trim().to_string())
            }
            other => {
                let found = match other {
                    Some(v) => format!("implementation=\"{}\"", ext::one_line(v)),
                    None => "no implementation".to_string(),
                };
                self.diags.push(err(
                    Code::BpmnInvalidImplementation,
                    el,
                    format!(
                        "{} has {found}: expected implementation=\"registered:<name>\" or \"channel:<name>\"",
                        describe(el)
                    ),
                ));
                TaskImpl::Registered(String::new())
            }
        };
        let qs = ext::q_elements(el);
        ext::misplaced(
            &qs,
            &["retry", "timeout", "io", "http"],
            el,
            &mut self.diags,
        );
        let retry_el = ext::single(&qs, "retry", el, &mut self.diags);
        let timeout_el = ext::single(&qs, "timeout", el, &mut self.diags);
        let io_el = ext::single(&qs, "io", el, &mut self.diags);
        let retry = retry_el.and_then(|q| ext::retry(q, el, &mut self.diags));
        let timeout =
            timeout_el.and_then(|q| ext::timeout(q, el, retry_el.is_some(), &mut self.diags));
        let io = io_el
            .map(|q| ext::io(q, el, &mut self.diags))
            .unwrap_or_default();
        if let (Some(q), None, TaskImpl::Channel(_)) = (retry_el, timeout_el, &implementation) {
            self.diags.push(err(
                Code::BpmnRetryNotApplicable,
                q,
                format!(
                    "q:retry on channel-call {} needs a route-less <q:timeout duration=…/>: without one \
                     the call has no timeout to retry, so the policy could never apply",
                    describe(el)
                ),
            ).element(el.label()));
        }
        let task = ServiceTask {
            implementation,
            retries: retry.into_iter().collect(),
            timeout,
            idempotent: true,
            io,
        };
        let ix = self.node(el, scope, NodeKind::ServiceTask(task));
        if el.attr("default").is_some() {
            self.pending_defaults.push(ix);
        }
        ix
    }
}
