//! Event sub-processes (`subProcess triggeredByEvent="true"`) at process and
//! sub-process level: one `NodeKind::EventSubProcess` (never entered by a
//! flow) whose single start event carries the trigger — timer, message,
//! error or escalation (`StartTrigger`); `isInterrupting` on that start
//! event (BPMN's default `true`) makes the node interrupting. Error starts
//! always interrupt (BPMN); a conditional start (`StartTrigger::Condition`)
//! is watched by `engine::condition`. A signal start waits on a signal park
//! (`engine::signal`), which a broadcast of its name reaches.

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::events::{self, Def};
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::bpmn::xml::Element;
use crate::model::{Expr, NodeIx, NodeKind, StartTrigger};

impl<'d> Builder<'d> {
    /// Whether `scope` is an event sub-process.
    pub(super) fn in_event_sub(&self, scope: Option<NodeIx>) -> bool {
        scope.is_some_and(|s| {
            matches!(
                self.nodes[s.0 as usize].kind,
                NodeKind::EventSubProcess { .. }
            )
        })
    }

    pub(super) fn event_sub(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        self.no_q(el);
        for c in el.bpmn_children().filter(|c| {
            matches!(
                c.local.as_str(),
                "standardLoopCharacteristics" | "multiInstanceLoopCharacteristics"
            )
        }) {
            self.diags.push(err(
                Code::BpmnUnsupportedElement,
                c,
                format!(
                    "{} on event sub-process {} is not supported: an event sub-process starts once per trigger",
                    c.local,
                    describe(el)
                ),
            ));
        }
        let starts: Vec<&Element> = el
            .bpmn_children()
            .filter(|c| c.local == "startEvent")
            .collect();
        if starts.len() != 1 {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                el,
                format!(
                    "event sub-process {} has {} start events: it needs exactly one, whose definition triggers it",
                    describe(el),
                    starts.len()
                ),
            ));
        }
        let interrupting = match starts
            .first()
            .and_then(|s| s.attr("isInterrupting"))
            .map(str::trim)
        {
            None | Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(v) => {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    starts[0],
                    format!(
                        "isInterrupting=\"{}\" on {}: must be `true` or `false`",
                        ext::one_line(v),
                        describe(starts[0])
                    ),
                ));
                true
            }
        };
        let ix = self.node(el, scope, NodeKind::EventSubProcess { interrupting });
        self.scope(el, Some(ix));
    }

    /// The start event of an event sub-process: its trigger.
    pub(super) fn event_sub_start(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &[], el, &mut self.diags);
        let def = self.definition(el);
        let interrupting = el.attr("isInterrupting").map(str::trim);
        let trigger = match def {
            Def::Timer(d) => StartTrigger::Timer(self.timer(d, el)),
            Def::Message(d) => match events::message_name(d, el, self.globals) {
                Ok(name) => StartTrigger::Message { name },
                Err(e) => {
                    self.diags.push(e);
                    StartTrigger::None
                }
            },
            Def::Error(d) => {
                if matches!(interrupting, Some("false") | Some("0")) {
                    self.diags.push(err(
                        Code::BpmnInvalidAttribute,
                        el,
                        format!(
                            "isInterrupting=\"false\" on error start event {}: an error always interrupts",
                            describe(el)
                        ),
                    ));
                }
                let codes = match events::error_code(d, el, self.globals) {
                    Ok(found) => found.map(|(code, _)| vec![code]),
                    Err(e) => {
                        self.diags.push(e);
                        None
                    }
                };
                StartTrigger::Error { codes }
            }
            Def::Escalation(d) => StartTrigger::Escalation {
                codes: self.caught_escalation(d, el),
            },
            Def::Conditional(d) => StartTrigger::Condition(self.event_condition(d, el)),
            Def::None => {
                return self.unsupported(
                    el,
                    scope,
                    "the start event of an event sub-process needs a timer, message, signal, error, escalation or conditional definition".into(),
                )
            }
            Def::Unsupported(d, _) if d.local == "signalEventDefinition" => StartTrigger::Signal {
                name: self.signal_name(d, el),
            },
            def @ (Def::Terminate(..) | Def::Compensate(..) | Def::Unsupported(..)) => {
                return self.unsupported_def(
                    el,
                    scope,
                    def,
                    "an event sub-process starts by a timer, a message, a signal, an error, an escalation or a condition",
                )
            }
        };
        self.node(el, scope, NodeKind::Start(trigger));
    }

    /// The CEL condition of a `conditionalEventDefinition` (its
    /// `<condition>`, parsed like a flow's); a missing or bad one is
    /// reported and stands as `false`.
    pub(super) fn event_condition(&mut self, def: &Element, el: &Element) -> Expr {
        let parsed = match def.bpmn_child("condition") {
            Some(c) => self.condition(el, c),
            None => {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    def,
                    format!(
                        "the conditional definition of {} needs a <condition>: a CEL expression over the variables",
                        describe(el)
                    ),
                ).element(el.label()));
                None
            }
        };
        // The load already failed: any condition stands in (`false` always parses).
        parsed.unwrap_or_else(|| Expr::parse_condition("false").expect("`false` parses"))
    }

    /// An event sub-process has no sequence flow in or out (BPMN).
    pub(super) fn check_event_subs(&mut self) {
        for n in &self.nodes {
            if !matches!(n.kind, NodeKind::EventSubProcess { .. }) {
                continue;
            }
            if let Some(&f) = n.incoming.first().or(n.outgoing.first()) {
                let el = self.flow_elements[f.0 as usize];
                self.diags.push(err(
                    Code::BpmnInvalidFlow,
                    el,
                    format!(
                        "{} connects event sub-process `{}`: an event sub-process is started by its trigger, never by a flow, and has no outgoing flow",
                        describe(el),
                        n.id
                    ),
                ));
            }
        }
    }
}
