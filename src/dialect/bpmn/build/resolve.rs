//! The second pass of the builder: references between elements (boundary
//! attachments, flow ends, default flows, `<incoming>`/`<outgoing>`) and the
//! checks that need them resolved (a routed timer next to a retry policy).
//!
//! Invariant: a reference that does not resolve is reported once and leaves
//! no dangling index behind (the flow is dropped, the boundary made opaque).

use super::{attr_ref, err, Builder};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::dialect::bpmn::events;
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::bpmn::xml::Element;
use crate::model::{
    BoundaryEvent, BoundaryTrigger, Expr, Flow, FlowIx, FlowKind, NodeIx, NodeKind,
};
use std::collections::HashMap;

impl<'d> Builder<'d> {
    /// Every second-pass step, in order (flows need the boundaries' kinds;
    /// defaults and the routed-timer check need the flows).
    pub(super) fn resolve(&mut self) {
        self.resolve_boundaries();
        self.resolve_flows();
        self.resolve_defaults();
        self.check_routed_timers();
        self.check_flow_refs();
    }

    fn resolve_boundaries(&mut self) {
        for pb in std::mem::take(&mut self.pending_boundaries) {
            let el = pb.el;
            let attached = match attr_ref(el, "attachedToRef") {
                None => {
                    self.diags.push(err(
                        Code::BpmnBoundaryUnattached,
                        el,
                        format!("{} has no attachedToRef", describe(el)),
                    ));
                    None
                }
                Some(r) => match self.node_of.get(events::strip_qname(r)) {
                    Some(&ix) => Some(ix),
                    None => {
                        self.diags.push(err(
                            Code::BpmnDanglingReference,
                            el,
                            format!(
                                "attachedToRef `{r}` of {} names no flow node of this process",
                                describe(el)
                            ),
                        ));
                        None
                    }
                },
            };
            let Some(a) = attached else {
                self.opaque.insert(pb.ix);
                continue;
            };
            if self.opaque.contains(&a) {
                // Attached to something already reported: say nothing more.
                self.opaque.insert(pb.ix);
                continue;
            }
            let target = &self.nodes[a.0 as usize];
            // A receive task is a `Catch` that takes boundaries (build/message.rs).
            let receive = matches!(target.kind, NodeKind::Catch(_))
                && self.elements[a.0 as usize].local == "receiveTask";
            let problem = if !receive
                && !matches!(
                    target.kind,
                    NodeKind::ServiceTask(_)
                        | NodeKind::SubProcess
                        | NodeKind::Fanout(_)
                        | NodeKind::CallProcess { .. }
                ) {
                Some("which is not an activity (a service task or sub-process)")
            } else if target.scope != self.nodes[pb.ix.0 as usize].scope {
                Some("which is in another scope")
            } else {
                None
            };
            if let Some(problem) = problem {
                let target_el = self.elements[a.0 as usize];
                self.diags.push(err(
                    Code::BpmnBoundaryUnattached,
                    el,
                    format!(
                        "{} is attached to {}, {problem}",
                        describe(el),
                        describe(target_el)
                    ),
                ));
                self.opaque.insert(pb.ix);
                continue;
            }
            self.nodes[pb.ix.0 as usize].kind = NodeKind::Boundary(BoundaryEvent {
                attached_to: a,
                interrupting: pb.interrupting,
                trigger: pb.trigger,
            });
            self.nodes[a.0 as usize].boundaries.push(pb.ix);
        }
    }

    /// `sourceRef`/`targetRef` → a node, or a diagnostic.
    fn endpoint(&mut self, el: &Element, attr: &str) -> Option<NodeIx> {
        let Some(r) = attr_ref(el, attr) else {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                el,
                format!("{} needs a `{attr}`", describe(el)),
            ));
            return None;
        };
        let found = self.node_of.get(events::strip_qname(r)).copied();
        if found.is_none() {
            self.diags.push(err(
                Code::BpmnDanglingReference,
                el,
                format!(
                    "{attr} `{r}` of {} names no flow node of this process",
                    describe(el)
                ),
            ));
        }
        found
    }

    fn resolve_flows(&mut self) {
        for (el, scope) in std::mem::take(&mut self.pending_flows) {
            if el.id().is_none() {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    "a sequenceFlow needs an `id`".into(),
                ));
            }
            self.foreign(el);
            let source = self.endpoint(el, "sourceRef");
            let target = self.endpoint(el, "targetRef");
            let (Some(source), Some(target)) = (source, target) else {
                continue;
            };
            let (s, t) = (
                &self.nodes[source.0 as usize],
                &self.nodes[target.0 as usize],
            );
            // Conditions on flows out of an exclusive gateway, and out of an
            // activity (BPMN's conditional sequence flows: every flow whose
            // condition holds is taken, the activity's default when none does).
            let from_xor = matches!(
                s.kind,
                NodeKind::ExclusiveGateway { .. }
                    | NodeKind::InclusiveGateway
                    | NodeKind::ServiceTask(_)
                    | NodeKind::SubProcess
                    | NodeKind::Fanout(_)
                    | NodeKind::CallProcess { .. }
            );
            if s.scope != scope || t.scope != scope {
                self.diags.push(err(
                    Code::BpmnInvalidFlow,
                    el,
                    format!(
                        "{} connects `{}` and `{}` across a sub-process boundary",
                        describe(el),
                        s.id,
                        t.id
                    ),
                ));
                continue;
            }
            let mut condition = el
                .bpmn_child("conditionExpression")
                .and_then(|c| self.condition(el, c));
            if el.bpmn_child("conditionExpression").is_some()
                && !from_xor
                && !self.opaque.contains(&source)
            {
                let source_el = self.elements[source.0 as usize];
                self.diags.push(err(
                    Code::BpmnUnsupportedElement,
                    el,
                    format!(
                        "conditional {} out of {} is not supported: only flows out of an exclusive or inclusive gateway or an activity carry conditions",
                        describe(el),
                        describe(source_el)
                    ),
                ));
                condition = None;
            }
            let ix = FlowIx(self.flows.len() as u32);
            self.flows.push(Flow {
                ix,
                id: el.id().unwrap_or_default().to_string(),
                pos: el.pos,
                source,
                target,
                condition,
                kind: FlowKind::Sequence,
            });
            self.flow_elements.push(el);
            self.nodes[source.0 as usize].outgoing.push(ix);
            self.nodes[target.0 as usize].incoming.push(ix);
        }
    }

    pub(super) fn condition(&mut self, flow: &Element, c: &Element) -> Option<Expr> {
        if let Some(lang) = c.attr("language").map(str::trim).filter(|l| !l.is_empty()) {
            if !lang.eq_ignore_ascii_case("cel") {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    c,
                    format!(
                        "language=\"{lang}\" on the condition of {}: Sutra conditions are CEL (omit `language` or write `cel`)",
                        describe(flow)
                    ),
                ).element(flow.label()));
                return None;
            }
        }
        let text = c.text.trim();
        match crate::model::Expr::parse_condition(text) {
            Ok(e) => Some(e),
            Err(e) => {
                self.diags.push(err(
                    e.load_code(),
                    flow,
                    format!(
                        "condition `{}` of {}: {}",
                        ext::one_line(text),
                        describe(flow),
                        ext::one_line(&e.to_string())
                    ),
                ));
                None
            }
        }
    }

    fn resolve_defaults(&mut self) {
        let flow_of: HashMap<&str, FlowIx> =
            self.flows.iter().map(|f| (f.id.as_str(), f.ix)).collect();
        let mut set = Vec::new();
        for gw in std::mem::take(&mut self.pending_defaults) {
            let el = self.elements[gw.0 as usize];
            let Some(r) = attr_ref(el, "default") else {
                continue;
            };
            let Some(&f) = flow_of.get(events::strip_qname(r)) else {
                // A flow that exists but was dropped has been reported already.
                if !self.flow_ids.contains(events::strip_qname(r)) {
                    self.diags.push(err(
                        Code::BpmnDanglingReference,
                        el,
                        format!("default `{r}` of {} names no sequence flow", describe(el)),
                    ));
                }
                continue;
            };
            let flow = &self.flows[f.0 as usize];
            if flow.source != gw {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!("default flow `{r}` of {} does not leave it", describe(el)),
                ));
            } else if self.flow_elements[f.0 as usize]
                .bpmn_child("conditionExpression")
                .is_some()
            {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    self.flow_elements[f.0 as usize],
                    format!(
                        "default flow `{r}` of {} must not carry a condition",
                        describe(el)
                    ),
                ));
            } else {
                set.push((gw, f));
            }
        }
        for (gw, f) in set {
            if matches!(
                self.nodes[gw.0 as usize].kind,
                NodeKind::ExclusiveGateway { .. }
            ) {
                self.nodes[gw.0 as usize].kind = NodeKind::ExclusiveGateway { default: Some(f) };
            } else {
                self.activity_default(gw, f);
            }
        }
    }

    /// The default flow of an activity or inclusive gateway is taken exactly when none of its
    /// conditional flows is: in the IR it carries the negation of their
    /// disjunction, `!((c1) || (c2) …)` (no conditional flow: unconditional),
    /// so the engine's "take every flow whose condition holds" is BPMN's rule.
    fn activity_default(&mut self, activity: NodeIx, default: FlowIx) {
        let others: Vec<String> = self.nodes[activity.0 as usize]
            .outgoing
            .iter()
            .filter(|&&f| f != default)
            .filter_map(|&f| self.flows[f.0 as usize].condition.as_ref())
            .map(|c| format!("({})", c.source()))
            .collect();
        if others.is_empty() {
            return;
        }
        let text = format!("!({})", others.join(" || "));
        match Expr::parse(&text) {
            Ok(e) => self.flows[default.0 as usize].condition = Some(e),
            Err(e) => {
                let el = self.flow_elements[default.0 as usize];
                self.diags.push(err(
                    Code::ConditionSyntax,
                    el,
                    format!(
                        "default {}: the negation of the other flows' conditions does not parse: {}",
                        describe(el),
                        ext::one_line(&e.to_string())
                    ),
                ));
            }
        }
    }

    /// A timer boundary with outgoing flows (a modelled timeout) on a task with a retry policy.
    fn check_routed_timers(&mut self) {
        for n in &self.nodes {
            let NodeKind::Boundary(b) = &n.kind else {
                continue;
            };
            if !matches!(b.trigger, BoundaryTrigger::Timer(_))
                || !b.interrupting
                || n.outgoing.is_empty()
            {
                continue;
            }
            let task = &self.nodes[b.attached_to.0 as usize];
            if let NodeKind::ServiceTask(t) = &task.kind {
                if !t.retries.is_empty() {
                    self.diags.push(
                        Diagnostic::error(
                            Code::BpmnRetryNotApplicable,
                            format!(
                                "timer boundary event `{}` has outgoing flows (a modelled timeout) on service task `{}`, \
                                 which has a q:retry policy: the modelled outcome always wins, so the policy could \
                                 never apply; remove the flows or the q:retry",
                                n.id, task.id
                            ),
                        )
                        .at(n.pos)
                        .element(n.id.clone()),
                    );
                }
            }
        }
    }

    /// Implicit starts (BPMN 2.0 §10.5.2): in a process or embedded
    /// sub-process without a start event, every flow node without an
    /// incoming sequence flow (boundary events aside) is instantiated when
    /// its scope is. The IR holds that as a synthetic none start event,
    /// `<scope id>#implicit-start` (no XML id can contain `#`), with one
    /// unconditional flow to each such node, `<start id>-><node id>`, so the
    /// engine forks them as it would after a written start event. A scope
    /// with no such node keeps `NO_START_EVENT`.
    pub(super) fn implicit_starts(&mut self, process: &'d Element) {
        let mut scopes: Vec<(Option<NodeIx>, &'d Element)> = vec![(None, process)];
        for (i, n) in self.nodes.iter().enumerate() {
            if matches!(n.kind, NodeKind::SubProcess) && !self.opaque.contains(&n.ix) {
                scopes.push((Some(n.ix), self.elements[i]));
            }
        }
        for (scope, el) in scopes {
            let in_scope = |n: &crate::model::Node| n.scope == scope;
            if self
                .nodes
                .iter()
                .any(|n| in_scope(n) && matches!(n.kind, NodeKind::Start(_)))
            {
                continue;
            }
            let entries: Vec<NodeIx> = self
                .nodes
                .iter()
                .filter(|n| {
                    in_scope(n)
                        && n.incoming.is_empty()
                        && !matches!(n.kind, NodeKind::Boundary(_))
                        && !self.opaque.contains(&n.ix)
                })
                .map(|n| n.ix)
                .collect();
            if entries.is_empty() {
                continue;
            }
            let container = match scope {
                Some(s) => self.nodes[s.0 as usize].id.clone(),
                None => el.id().unwrap_or_default().to_string(),
            };
            let start = NodeIx(self.nodes.len() as u32);
            let start_id = format!("{container}#implicit-start");
            self.nodes.push(crate::model::Node {
                ix: start,
                id: start_id.clone(),
                name: None,
                pos: el.pos,
                scope,
                kind: NodeKind::Start(crate::model::StartTrigger::None),
                incoming: Vec::new(),
                outgoing: Vec::new(),
                boundaries: Vec::new(),
                join: None,
                data: None,
            });
            self.elements.push(el);
            for target in entries {
                let ix = FlowIx(self.flows.len() as u32);
                let target_id = self.nodes[target.0 as usize].id.clone();
                self.flows.push(Flow {
                    ix,
                    id: format!("{start_id}->{target_id}"),
                    pos: el.pos,
                    source: start,
                    target,
                    condition: None,
                    kind: FlowKind::Sequence,
                });
                self.flow_elements.push(el);
                self.nodes[start.0 as usize].outgoing.push(ix);
                self.nodes[target.0 as usize].incoming.push(ix);
            }
        }
    }

    /// `<incoming>`/`<outgoing>` children must name sequence flows of the process.
    fn check_flow_refs(&mut self) {
        let known = &self.flow_ids;
        let mut found = Vec::new();
        for el in &self.elements {
            for c in el
                .bpmn_children()
                .filter(|c| c.local == "incoming" || c.local == "outgoing")
            {
                let r = c.text.trim();
                if !r.is_empty() && !known.contains(events::strip_qname(r)) {
                    found.push(
                        err(
                            Code::BpmnDanglingReference,
                            c,
                            format!(
                                "<{}> `{r}` of {} names no sequence flow",
                                c.local,
                                describe(el)
                            ),
                        )
                        .element(el.label()),
                    );
                }
            }
        }
        self.diags.extend(found);
    }
}
