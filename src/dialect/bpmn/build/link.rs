//! Link events: a link throw continues at the link catch of the same scope
//! with the same name, as if a sequence flow joined them (BPMN 2.0 §10.5.6:
//! "off-page connectors"). Both are pass-through nodes in the IR and the
//! pair gets a synthetic flow `<throw id>-><catch id>`, so the engine never
//! sees a link. Checked at load: a throw whose name no catch of its scope
//! has, and two catches of one scope with one name
//! (`SUTRA.CONFIG.BPMN.LINK_UNMATCHED`).

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::ext::describe;
use crate::dialect::xml::Element;
use crate::model::{Flow, FlowIx, FlowKind, NodeIx, NodeKind};

/// One end of a link: its node, scope, name, and whether it throws.
pub(super) struct LinkEnd<'d> {
    node: NodeIx,
    scope: Option<NodeIx>,
    name: String,
    throw: bool,
    el: &'d Element,
}

impl<'d> Builder<'d> {
    fn link_name(&mut self, el: &'d Element, def: &Element) -> String {
        // BPMN requires `name` on the definition; the event's name stands in.
        match def
            .attr("name")
            .or_else(|| el.attr("name"))
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            Some(n) => n.to_string(),
            None => {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        def,
                        format!("the link definition of {} needs a `name`", describe(el)),
                    )
                    .element(el.label()),
                );
                String::new()
            }
        }
    }

    pub(super) fn link_catch(&mut self, el: &'d Element, scope: Option<NodeIx>, def: &Element) {
        let name = self.link_name(el, def);
        let node = self.node(el, scope, NodeKind::Pass { set: None });
        self.links.push(LinkEnd {
            node,
            scope,
            name,
            throw: false,
            el,
        });
    }

    pub(super) fn link_throw(&mut self, el: &'d Element, scope: Option<NodeIx>, def: &Element) {
        let name = self.link_name(el, def);
        let node = self.node(el, scope, NodeKind::Pass { set: None });
        self.links.push(LinkEnd {
            node,
            scope,
            name,
            throw: true,
            el,
        });
    }

    /// Join every link throw to its catch (after the written flows exist).
    pub(super) fn resolve_links(&mut self) {
        let links = std::mem::take(&mut self.links);
        for (i, c) in links.iter().enumerate().filter(|(_, l)| !l.throw) {
            if let Some(first) = links[..i]
                .iter()
                .find(|o| !o.throw && o.scope == c.scope && o.name == c.name)
            {
                self.diags.push(err(
                    Code::BpmnLinkUnmatched,
                    c.el,
                    format!(
                        "{} catches link `{}`, which {} of the same scope catches already",
                        describe(c.el),
                        c.name,
                        describe(first.el)
                    ),
                ));
            }
        }
        for t in links.iter().filter(|l| l.throw) {
            if self.opaque.contains(&t.node) {
                continue;
            }
            let Some(c) = links
                .iter()
                .find(|o| !o.throw && o.scope == t.scope && o.name == t.name)
            else {
                self.diags.push(err(
                    Code::BpmnLinkUnmatched,
                    t.el,
                    format!(
                        "{} throws link `{}`, which no link catch event of its scope catches",
                        describe(t.el),
                        t.name
                    ),
                ));
                continue;
            };
            let ix = FlowIx(self.flows.len() as u32);
            let id = format!(
                "{}->{}",
                self.nodes[t.node.0 as usize].id, self.nodes[c.node.0 as usize].id
            );
            self.flows.push(Flow {
                ix,
                id,
                pos: t.el.pos,
                source: t.node,
                target: c.node,
                condition: None,
                kind: FlowKind::Sequence,
            });
            self.flow_elements.push(t.el);
            self.nodes[t.node.0 as usize].outgoing.push(ix);
            self.nodes[c.node.0 as usize].incoming.push(ix);
        }
    }
}
