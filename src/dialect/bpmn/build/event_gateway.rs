//! The event-based gateway: `NodeKind::EventGateway`, its token waiting on
//! every catch its flows lead to (engine/event_gateway.rs). Checked once
//! the flows exist: at least two outgoing flows, each to a message, timer
//! or signal intermediate catch event or a receive task (a `Catch`) that
//! has no other incoming flow, and no condition on them
//! (`SUTRA.CONFIG.BPMN.EVENT_GATEWAY_INVALID`). An instantiating gateway
//! (`instantiate="true"`, `eventGatewayType="Parallel"`) is refused with
//! `SUTRA.CONFIG.BPMN.EVENT_GATEWAY_INSTANTIATE_UNSUPPORTED`.

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::ext::describe;
use crate::dialect::xml::Element;
use crate::model::{NodeIx, NodeKind};

impl<'d> Builder<'d> {
    pub(super) fn event_gateway(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        self.no_q(el);
        let instantiate = el.attr("instantiate").map(str::trim) == Some("true")
            || el.attr("eventGatewayType").map(str::trim) == Some("Parallel");
        if instantiate {
            self.diags.push(err(
                Code::BpmnEventGatewayInstantiate,
                el,
                format!(
                    "{} is an instantiating event-based gateway: not supported; start the process \
                     with message, signal or timer start events instead",
                    describe(el)
                ),
            ));
            self.placeholder(el, scope);
            return;
        }
        self.node(el, scope, NodeKind::EventGateway);
    }

    /// The flows of every event-based gateway (after they are resolved).
    pub(super) fn check_event_gateways(&mut self) {
        for i in 0..self.nodes.len() {
            let g = &self.nodes[i];
            if !matches!(g.kind, NodeKind::EventGateway) || self.opaque.contains(&g.ix) {
                continue;
            }
            let el = self.elements[i];
            let mut problem = None;
            if g.outgoing.len() < 2 {
                problem = Some("it needs at least two outgoing flows".to_string());
            }
            for &f in &g.outgoing {
                let flow = &self.flows[f.0 as usize];
                let target = &self.nodes[flow.target.0 as usize];
                if self.opaque.contains(&target.ix) {
                    continue;
                }
                if flow.condition.is_some() {
                    problem = Some(format!("flow `{}` has a condition", flow.id));
                } else if !matches!(target.kind, NodeKind::Catch(_)) {
                    problem = Some(format!(
                        "flow `{}` leads to {}, not to a message, timer or signal catch event or a receive task",
                        flow.id,
                        describe(self.elements[target.ix.0 as usize])
                    ));
                } else if target.incoming.len() > 1 {
                    problem = Some(format!(
                        "{} after it has other incoming flows",
                        describe(self.elements[target.ix.0 as usize])
                    ));
                }
            }
            if let Some(p) = problem {
                self.diags.push(err(
                    Code::BpmnEventGatewayInvalid,
                    el,
                    format!("event-based gateway {}: {p}", describe(el)),
                ));
            }
        }
    }
}
