//! Signal, thrown-message and "Multiple" events, and shared event
//! definitions (`eventDefinitionRef`): the cases the common event path
//! (`events::definition`) does not take. Each hook returns `false` when
//! the event is not one of them (then the common path builds it as before).
//!
//! Handled here: a definition list of timers, messages and signals (a
//! catch with several is BPMN "Multiple": the first to fire wins;
//! `parallelMultiple="true"` is refused with its own code), throws of
//! messages and signals (intermediate and end; all of them are thrown),
//! signal starts and boundaries, link events (build/link.rs), and any of
//! these reached through `eventDefinitionRef` (a root-level definition).

use super::{err, Builder, PendingBoundary};
use crate::codes::Code;
use crate::dialect::bpmn::events;
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::xml::Element;
use crate::model::{BoundaryTrigger, CatchTrigger, EndKind, NodeIx, NodeKind, StartTrigger, Throw};

/// What this module builds a definition into.
const OURS: &[&str] = &[
    "timerEventDefinition",
    "messageEventDefinition",
    "signalEventDefinition",
    "linkEventDefinition",
];

impl<'d> Builder<'d> {
    /// An event's definitions, its own then those its `eventDefinitionRef`s
    /// name; `None` (after a diagnostic) when a reference dangles. The
    /// flag says whether a reference was followed.
    fn event_defs(&mut self, el: &'d Element) -> Option<(Vec<&'d Element>, bool)> {
        let mut defs = Vec::new();
        let mut refs = false;
        for c in el.bpmn_children() {
            if c.local == "eventDefinitionRef" {
                refs = true;
                let r = c.text.trim();
                match self.shared.get(events::strip_qname(r)) {
                    Some(d) => defs.push(*d),
                    None => {
                        self.diags.push(
                            err(
                                Code::BpmnDanglingReference,
                                c,
                                format!(
                                    "eventDefinitionRef `{r}` of {} names no event definition of the <definitions>",
                                    describe(el)
                                ),
                            )
                            .element(el.label()),
                        );
                        return None;
                    }
                }
            } else if c.local.ends_with("EventDefinition") {
                defs.push(c);
            }
        }
        Some((defs, refs))
    }

    /// The definitions when this module builds the event: all of them
    /// timers, messages, signals or links (`allow` narrows it), and a
    /// signal, a link, several, or a shared one among them.
    fn ours(&mut self, el: &'d Element, allow: &[&str]) -> Option<Vec<&'d Element>> {
        let defs: Vec<&'d Element> = el
            .bpmn_children()
            .filter(|c| c.local.ends_with("EventDefinition") || c.local == "eventDefinitionRef")
            .collect();
        let inline_only = defs.iter().all(|d| d.local != "eventDefinitionRef");
        let special = |d: &&Element| {
            matches!(
                d.local.as_str(),
                "signalEventDefinition" | "linkEventDefinition"
            )
        };
        if inline_only && defs.len() == 1 && !defs.iter().any(special) {
            return None;
        }
        // A dangling reference is reported here (then built as a placeholder).
        let resolved = match self.event_defs(el) {
            Some((d, _)) => d,
            None => return Some(Vec::new()),
        };
        if resolved.is_empty()
            || !resolved
                .iter()
                .all(|d| OURS.contains(&d.local.as_str()) && allow.contains(&d.local.as_str()))
        {
            return None;
        }
        Some(resolved)
    }

    /// The name of the `<signal>` a `signalEventDefinition` refers to (its
    /// `name`, else its id: BPMN matches signals by name).
    pub(super) fn signal_name(&mut self, def: &Element, el: &Element) -> String {
        let Some(r) = def
            .attr("signalRef")
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            self.diags.push(
                err(
                    Code::BpmnInvalidAttribute,
                    def,
                    format!(
                        "the signal definition of {} needs a `signalRef`",
                        describe(el)
                    ),
                )
                .element(el.label()),
            );
            return String::new();
        };
        let id = events::strip_qname(r);
        match self.globals.signals.get(id) {
            Some(Some(name)) => name.clone(),
            Some(None) => id.to_string(),
            None => {
                self.diags.push(
                    err(
                        Code::BpmnDanglingReference,
                        def,
                        format!("signalRef `{r}` of {} names no <signal>", describe(el)),
                    )
                    .element(el.label()),
                );
                String::new()
            }
        }
    }

    /// The q: elements of an event: `q:correlation` when its definitions
    /// include a message, `q:io` on a throw (`throw`), nothing else.
    fn q_of<'e>(&mut self, el: &'e Element, defs: &[&Element], throw: bool) -> Vec<&'e Element> {
        let qs = ext::q_elements(el);
        let message = defs.iter().any(|d| d.local == "messageEventDefinition");
        let allowed: &[&str] = match (message, throw) {
            (true, true) => &["correlation", "io"],
            (true, false) => &["correlation"],
            (false, true) => &["io"],
            (false, false) => &[],
        };
        ext::misplaced(&qs, allowed, el, &mut self.diags);
        qs
    }

    /// What a throw carries: `q:io inputPath` (an object of the thrower's
    /// variables); a `resultPath` means nothing on a throw and is refused.
    pub(super) fn throw_payload(&mut self, el: &Element, qs: &[&Element]) -> Option<String> {
        let q = ext::single(qs, "io", el, &mut self.diags)?;
        let io = ext::io(q, el, &mut self.diags);
        if io.result_path.is_some() {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                q,
                format!(
                    "resultPath on q:io of {}: a throw has no result; inputPath selects what it carries",
                    describe(el)
                ),
            ));
        }
        io.input_path
    }

    fn catch_trigger(&mut self, d: &Element, el: &Element, qs: &[&Element]) -> CatchTrigger {
        match d.local.as_str() {
            "timerEventDefinition" => CatchTrigger::Timer(self.timer(d, el)),
            "messageEventDefinition" => CatchTrigger::Message(self.message_ref(el, d, qs)),
            _ => CatchTrigger::Signal {
                name: self.signal_name(d, el),
            },
        }
    }

    /// An intermediate catch event this module builds: `true` when it did.
    pub(super) fn catch_ext(&mut self, el: &'d Element, scope: Option<NodeIx>) -> bool {
        let Some(defs) = self.ours(el, OURS) else {
            return false;
        };
        if defs.is_empty() {
            self.placeholder(el, scope);
            return true;
        }
        if let [d] = defs.as_slice() {
            if d.local == "linkEventDefinition" {
                self.no_q(el);
                self.link_catch(el, scope, d);
                return true;
            }
        }
        if defs.iter().any(|d| d.local == "linkEventDefinition") {
            self.refuse(el, scope, "a link event has exactly one definition");
            return true;
        }
        if defs.len() > 1 && el.attr("parallelMultiple").map(str::trim) == Some("true") {
            self.diags.push(err(
                Code::BpmnParallelMultiple,
                el,
                format!(
                    "{} has parallelMultiple=\"true\" (every definition must fire): not supported; \
                     use a parallel gateway to catch each event on a branch of its own",
                    describe(el)
                ),
            ));
            self.placeholder(el, scope);
            return true;
        }
        let qs = self.q_of(el, &defs, false);
        let mut triggers: Vec<CatchTrigger> = defs
            .iter()
            .map(|d| self.catch_trigger(d, el, &qs))
            .collect();
        let trigger = if triggers.len() == 1 {
            triggers.remove(0)
        } else {
            CatchTrigger::Any(triggers)
        };
        self.node(el, scope, NodeKind::Catch(trigger));
        true
    }

    fn refuse(&mut self, el: &'d Element, scope: Option<NodeIx>, why: &str) {
        self.diags.push(err(
            Code::BpmnUnsupportedElement,
            el,
            format!("{} is not supported: {why}", describe(el)),
        ));
        self.placeholder(el, scope);
    }

    fn throws(&mut self, el: &'d Element, defs: &[&'d Element]) -> Vec<Throw> {
        let qs = self.q_of(el, defs, true);
        let payload = self.throw_payload(el, &qs);
        let mut out = Vec::new();
        for d in defs {
            match d.local.as_str() {
                "messageEventDefinition" => {
                    let m = self.message_ref(el, d, &qs);
                    out.push(Throw::Message {
                        name: m.name,
                        correlation_key: m.correlation_key,
                        payload: payload.clone(),
                    });
                }
                _ => out.push(Throw::Signal {
                    name: self.signal_name(d, el),
                    payload: payload.clone(),
                }),
            }
        }
        out
    }

    /// An intermediate throw event of messages, signals or a link.
    pub(super) fn throw_ext(&mut self, el: &'d Element, scope: Option<NodeIx>) -> bool {
        const THROWN: &[&str] = &[
            "messageEventDefinition",
            "signalEventDefinition",
            "linkEventDefinition",
        ];
        let defs = match self.ours(el, THROWN) {
            Some(d) => d,
            // A single inline message throw is ours too.
            None => match self.event_defs_plain(el) {
                Some(d) if d.local == "messageEventDefinition" => vec![d],
                _ => return false,
            },
        };
        if defs.is_empty() {
            self.placeholder(el, scope);
            return true;
        }
        if let [d] = defs.as_slice() {
            if d.local == "linkEventDefinition" {
                self.no_q(el);
                self.link_throw(el, scope, d);
                return true;
            }
        }
        if defs.iter().any(|d| d.local == "linkEventDefinition") {
            self.refuse(el, scope, "a link event has exactly one definition");
            return true;
        }
        let throws = self.throws(el, &defs);
        self.node(el, scope, NodeKind::Throw(throws));
        true
    }

    /// The one inline definition of an event, if it has exactly one.
    fn event_defs_plain(&self, el: &'d Element) -> Option<&'d Element> {
        let mut it = el
            .bpmn_children()
            .filter(|c| c.local.ends_with("EventDefinition") || c.local == "eventDefinitionRef");
        match (it.next(), it.next()) {
            (Some(d), None) => Some(d),
            _ => None,
        }
    }

    /// A message or signal end event (several definitions: all thrown).
    pub(super) fn end_ext(&mut self, el: &'d Element, scope: Option<NodeIx>) -> bool {
        const THROWN: &[&str] = &["messageEventDefinition", "signalEventDefinition"];
        let defs = match self.ours(el, THROWN) {
            Some(d) => d,
            None => match self.event_defs_plain(el) {
                Some(d) if d.local == "messageEventDefinition" => vec![d],
                _ => return false,
            },
        };
        if defs.is_empty() {
            self.placeholder(el, scope);
            return true;
        }
        let throws = self.throws(el, &defs);
        self.node(el, scope, NodeKind::End(EndKind::Throw(throws)));
        true
    }

    /// A process-level signal start, or a timer or message start through
    /// a shared definition.
    pub(super) fn start_ext(&mut self, el: &'d Element, scope: Option<NodeIx>) -> bool {
        if scope.is_some() {
            return false;
        }
        let Some(defs) = self.ours(
            el,
            &[
                "timerEventDefinition",
                "messageEventDefinition",
                "signalEventDefinition",
            ],
        ) else {
            return false;
        };
        let [d] = defs.as_slice() else {
            if !defs.is_empty() {
                self.refuse(
                    el,
                    scope,
                    "a start event with several definitions (a process starts by one trigger)",
                );
            } else {
                self.placeholder(el, scope);
            }
            return true;
        };
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &[], el, &mut self.diags);
        let trigger = match d.local.as_str() {
            "timerEventDefinition" => match events::timer(d, el) {
                Ok(t) => StartTrigger::Timer(t),
                Err(e) => {
                    self.diags.push(e);
                    StartTrigger::None
                }
            },
            "messageEventDefinition" => match events::message_name(d, el, self.globals) {
                Ok(name) => StartTrigger::Message { name },
                Err(e) => {
                    self.diags.push(e);
                    StartTrigger::None
                }
            },
            _ => StartTrigger::Signal {
                name: self.signal_name(d, el),
            },
        };
        self.node(el, scope, NodeKind::Start(trigger));
        true
    }

    /// A signal boundary, or a timer or message one through a shared
    /// definition. Several definitions on a boundary are refused.
    pub(super) fn boundary_ext(&mut self, el: &'d Element, scope: Option<NodeIx>) -> bool {
        let Some(defs) = self.ours(
            el,
            &[
                "timerEventDefinition",
                "messageEventDefinition",
                "signalEventDefinition",
            ],
        ) else {
            return false;
        };
        let [d] = defs.as_slice() else {
            if !defs.is_empty() {
                self.refuse(el, scope, "a boundary event with several definitions");
            } else {
                self.placeholder(el, scope);
            }
            return true;
        };
        let qs = self.q_of(el, &defs, false);
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
        let trigger = match d.local.as_str() {
            "timerEventDefinition" => BoundaryTrigger::Timer(self.timer(d, el)),
            "messageEventDefinition" => BoundaryTrigger::Message(self.message_ref(el, d, &qs)),
            _ => BoundaryTrigger::Signal {
                name: self.signal_name(d, el),
            },
        };
        let ix = self.node(el, scope, NodeKind::Pass { set: None });
        self.pending_boundaries.push(PendingBoundary {
            ix,
            el,
            interrupting,
            trigger,
        });
        true
    }
}
