//! BPMN compensation: a compensation boundary event on an activity, linked
//! by an `<association>` to its handler (an activity with
//! `isForCompensation="true"`), becomes a `FlowKind::Compensation` flow from
//! the activity to the handler — the IR HX's compensators use, so one
//! unwind (`engine::unwind`) runs both. Compensate throw events (intermediate
//! and end; `activityRef` optional) become `NodeKind::Compensate` /
//! `EndKind::Compensate`.
//!
//! Checked here: a handler is a service task with no sequence flow in or
//! out, reached by exactly one association from a compensation boundary; a
//! compensation boundary has one handler; `activityRef` names an activity
//! of the throw's scope or of an enclosing one; `waitForCompletion="false"`
//! is refused (Sutra's throw always waits, as Camunda's does).

use super::{attr_ref, err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::events::{self, Def};
use crate::dialect::bpmn::ext::describe;
use crate::dialect::bpmn::xml::Element;
use crate::model::{
    BoundaryEvent, BoundaryTrigger, CompensateThrow, EndKind, Flow, FlowIx, FlowKind, NodeIx,
    NodeKind,
};

impl<'d> Builder<'d> {
    /// `el` (node `ix`) has `isForCompensation="true"`.
    pub(super) fn compensation_handler(&mut self, el: &'d Element, ix: NodeIx) {
        if el.local != "serviceTask" {
            self.diags.push(err(
                Code::BpmnUnsupportedElement,
                el,
                format!(
                    "{} is a compensation handler (isForCompensation): Sutra runs service tasks as handlers",
                    describe(el)
                ),
            ));
            self.opaque.insert(ix);
            return;
        }
        self.for_compensation.push(ix);
    }

    /// What a compensate throw event compensates (its `activityRef` is
    /// resolved once every node exists, `resolve_compensation`).
    pub(super) fn compensate_throw(&mut self, def: &Element, el: &Element) -> CompensateThrow {
        if matches!(
            def.attr("waitForCompletion").map(str::trim),
            Some("false") | Some("0")
        ) {
            self.diags.push(err(
                Code::BpmnUnsupportedElement,
                def,
                format!(
                    "waitForCompletion=\"false\" on {} is not supported: a compensate throw waits until its handlers have run",
                    describe(el)
                ),
            ).element(el.label()));
        }
        CompensateThrow { activity: None }
    }

    /// Remember a compensate throw's `activityRef`, if it names one.
    pub(super) fn compensate_ref(&mut self, ix: NodeIx, el: &'d Element) {
        if let Def::Compensate(d) = self.definition(el) {
            if attr_ref(d, "activityRef").is_some() {
                self.pending_compensate.push((ix, d));
            }
        }
    }

    /// The second pass: `activityRef`s, associations into compensation
    /// flows, the handler and boundary checks, event sub-process flows.
    pub(super) fn resolve_compensation(&mut self) {
        self.check_event_subs();
        for (ix, d) in std::mem::take(&mut self.pending_compensate) {
            let Some(r) = attr_ref(d, "activityRef") else {
                continue;
            };
            let Some(&a) = self.node_of.get(events::strip_qname(r)) else {
                self.diags.push(
                    err(
                        Code::BpmnDanglingReference,
                        d,
                        format!(
                            "activityRef `{r}` of {} names no flow node of this process",
                            describe(self.elements[ix.0 as usize])
                        ),
                    )
                    .element(self.elements[ix.0 as usize].label()),
                );
                continue;
            };
            let activity = &self.nodes[a.0 as usize];
            // The activity is in the throw's scope or an enclosing one.
            let mut scope = self.nodes[ix.0 as usize].scope;
            let mut visible = activity.scope == scope;
            while let (false, Some(s)) = (visible, scope) {
                scope = self.nodes[s.0 as usize].scope;
                visible = activity.scope == scope;
            }
            let is_activity = matches!(
                activity.kind,
                NodeKind::ServiceTask(_)
                    | NodeKind::SubProcess
                    | NodeKind::CallProcess { .. }
                    | NodeKind::Fanout(_)
            );
            if !is_activity || !visible {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    d,
                    format!(
                        "activityRef `{r}` of {}: names {}, which is not an activity of the throw's scope or of a scope enclosing it",
                        describe(self.elements[ix.0 as usize]),
                        describe(self.elements[a.0 as usize])
                    ),
                ).element(self.elements[ix.0 as usize].label()));
                continue;
            }
            match &mut self.nodes[ix.0 as usize].kind {
                NodeKind::Compensate(t) | NodeKind::End(EndKind::Compensate(t)) => {
                    t.activity = Some(a)
                }
                _ => {}
            }
        }
        let mut linked: Vec<NodeIx> = Vec::new();
        let mut boundaries: Vec<NodeIx> = Vec::new();
        for el in std::mem::take(&mut self.pending_associations) {
            let ends = (
                attr_ref(el, "sourceRef").and_then(|r| self.node_of.get(events::strip_qname(r))),
                attr_ref(el, "targetRef").and_then(|r| self.node_of.get(events::strip_qname(r))),
            );
            let (Some(&s), Some(&t)) = ends else {
                continue; // an annotation's association, or a dangling one: nothing to run
            };
            let (b, h) = if self.for_compensation.contains(&t) {
                (s, t)
            } else if self.for_compensation.contains(&s) {
                (t, s)
            } else {
                continue;
            };
            let NodeKind::Boundary(BoundaryEvent {
                attached_to,
                trigger: BoundaryTrigger::Compensation,
                ..
            }) = self.nodes[b.0 as usize].kind
            else {
                if !self.opaque.contains(&b) {
                    self.diags.push(err(
                        Code::BpmnInvalidAttribute,
                        el,
                        format!(
                            "association `{}` links compensation handler `{}` to `{}`, which is not a compensation boundary event",
                            el.id().unwrap_or_default(),
                            self.nodes[h.0 as usize].id,
                            self.nodes[b.0 as usize].id
                        ),
                    ));
                }
                continue;
            };
            if linked.contains(&h) || boundaries.contains(&b) {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!(
                        "association `{}`: a compensation boundary has one handler and a handler one boundary",
                        el.id().unwrap_or_default()
                    ),
                ));
                continue;
            }
            linked.push(h);
            boundaries.push(b);
            let ix = FlowIx(self.flows.len() as u32);
            self.flows.push(Flow {
                ix,
                id: el.id().unwrap_or_default().to_string(),
                pos: el.pos,
                source: attached_to,
                target: h,
                condition: None,
                kind: FlowKind::Compensation,
            });
            self.flow_elements.push(el);
            self.nodes[attached_to.0 as usize].outgoing.push(ix);
            self.nodes[h.0 as usize].incoming.push(ix);
        }
        for &h in &self.for_compensation {
            let node = &self.nodes[h.0 as usize];
            let el = self.elements[h.0 as usize];
            let sequence = node
                .incoming
                .iter()
                .chain(&node.outgoing)
                .any(|&f| self.flows[f.0 as usize].kind != FlowKind::Compensation);
            if sequence {
                self.diags.push(err(
                    Code::BpmnInvalidFlow,
                    el,
                    format!(
                        "compensation handler {} has a sequence flow: a handler runs only when its activity is compensated",
                        describe(el)
                    ),
                ));
            } else if !linked.contains(&h) {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!(
                        "compensation handler {} is linked to no compensation boundary event by an association",
                        describe(el)
                    ),
                ));
                self.opaque.insert(h);
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let ix = NodeIx(i as u32);
            if matches!(
                n.kind,
                NodeKind::Boundary(BoundaryEvent {
                    trigger: BoundaryTrigger::Compensation,
                    ..
                })
            ) && !boundaries.contains(&ix)
            {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    self.elements[i],
                    format!(
                        "compensation boundary event {} has no handler: an association must link it to an activity with isForCompensation=\"true\"",
                        describe(self.elements[i])
                    ),
                ));
            }
        }
    }
}
