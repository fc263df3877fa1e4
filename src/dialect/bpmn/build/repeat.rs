//! Loop characteristics: `multiInstanceLoopCharacteristics` (with Sutra's
//! `q:multiInstance` inside its `extensionElements`) and
//! `standardLoopCharacteristics`, lowered onto a fan-out (`model::Repeat`).
//!
//! An activity `A` with loop characteristics becomes three layers in the IR:
//! the *body* `A#body` (a `Fanout`, at `A`'s place: every sequence flow and
//! boundary event written for `A` is the body's), one branch scope per
//! iteration, and `A` itself inside it. For a sub-process the branch is `A`;
//! for a task (or a call activity) it is a synthetic sub-process
//! `A#instance` holding a start `A#start` and `A`. So `A`'s attempts and
//! state keep `A`'s id, and no XML id can contain `#`.

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::bpmn::xml::{Element, Ns};
use crate::model::{
    Expr, Fanout, Flow, FlowIx, FlowKind, Node, NodeIx, NodeKind, Over, Repeat, StartTrigger,
    DEFAULT_MAX_CONCURRENCY,
};

const MI_ATTRS: &[&str] = &[
    "id",
    "isSequential",
    "behavior",
    "noneBehaviorEventRef",
    "oneBehaviorEventRef",
];
const LOOP_ATTRS: &[&str] = &["id", "testBefore", "loopMaximum"];
const Q_MI_ATTRS: &[&str] = &[
    "collection",
    "element",
    "outputCollection",
    "outputElement",
    "maxConcurrency",
];

/// A variable name an expression can read: a CEL identifier.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(s, "true" | "false" | "null" | "in")
}

impl<'d> Builder<'d> {
    /// The loop characteristics of activity `el`, if it has any; `Err(())`
    /// when they are present but refused (reported).
    pub(super) fn loop_characteristics(
        &mut self,
        el: &'d Element,
    ) -> Option<Result<(Repeat, &'d Element), ()>> {
        let mut found = el.bpmn_children().filter(|c| {
            matches!(
                c.local.as_str(),
                "standardLoopCharacteristics" | "multiInstanceLoopCharacteristics"
            )
        });
        let first = found.next()?;
        if let Some(second) = found.next() {
            self.diags.push(err(
                Code::BpmnInvalidAttribute,
                second,
                format!("{} has more than one loop characteristics", describe(el)),
            ));
            return Some(Err(()));
        }
        let before = self.diags.len();
        let rep = match first.local.as_str() {
            "multiInstanceLoopCharacteristics" => self.multi_instance(first, el),
            _ => self.standard_loop(first, el),
        };
        Some(match rep {
            Some(r) if self.diags.len() == before => Ok((r, first)),
            _ => Err(()),
        })
    }

    fn attrs_known(&mut self, c: &Element, host: &Element, allowed: &[&str]) {
        for a in c.attrs.iter().filter(|a| a.ns == Ns::None) {
            if !allowed.contains(&a.local.as_str()) {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        c,
                        format!(
                            "attribute `{}` on {} of {} is not supported (expected: {})",
                            a.local,
                            c.local,
                            describe(host),
                            allowed.join(", ")
                        ),
                    )
                    .element(host.label()),
                );
            }
        }
    }

    fn boolean(&mut self, c: &Element, host: &Element, attr: &str, default: bool) -> bool {
        match c.attr(attr).map(str::trim) {
            None => default,
            Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(v) => {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        c,
                        format!(
                            "{attr}=\"{}\" on {} of {}: must be `true` or `false`",
                            ext::one_line(v),
                            c.local,
                            describe(host)
                        ),
                    )
                    .element(host.label()),
                );
                default
            }
        }
    }

    /// A CEL expression in an element's text (`language` absent or CEL).
    fn text_expr(&mut self, x: &Element, host: &Element, condition: bool) -> Option<Expr> {
        if let Some(lang) = x.attr("language").map(str::trim).filter(|l| !l.is_empty()) {
            if !lang.eq_ignore_ascii_case("cel") {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        x,
                        format!(
                            "language=\"{lang}\" on the {} of {}: Sutra expressions are CEL",
                            x.local,
                            describe(host)
                        ),
                    )
                    .element(host.label()),
                );
                return None;
            }
        }
        self.expr_text(x.text.trim(), &x.local, x, host, condition)
    }

    fn expr_text(
        &mut self,
        text: &str,
        what: &str,
        at: &Element,
        host: &Element,
        condition: bool,
    ) -> Option<Expr> {
        let parsed = if condition {
            Expr::parse_condition(text)
        } else {
            Expr::parse(text)
        };
        match parsed {
            Ok(e) => Some(e),
            Err(e) => {
                self.diags.push(
                    err(
                        e.load_code(),
                        at,
                        format!(
                            "{what} `{}` of {}: {}",
                            ext::one_line(text),
                            describe(host),
                            ext::one_line(&e.to_string())
                        ),
                    )
                    .element(host.label()),
                );
                None
            }
        }
    }

    fn refuse_child(&mut self, c: &Element, host: &Element, why: &str) {
        self.diags.push(
            err(
                Code::BpmnUnsupportedElement,
                c,
                format!(
                    "{} in the loop characteristics of {}: {why}",
                    c.local,
                    describe(host)
                ),
            )
            .element(host.label()),
        );
    }

    fn multi_instance(&mut self, mi: &'d Element, el: &'d Element) -> Option<Repeat> {
        self.attrs_known(mi, el, MI_ATTRS);
        let sequential = self.boolean(mi, el, "isSequential", false);
        match mi.attr("behavior").map(str::trim) {
            None | Some("All") | Some("None") => {}
            Some(v) => self.diags.push(
                err(
                    Code::BpmnUnsupportedElement,
                    mi,
                    format!(
                        "behavior=\"{}\" on the multiInstanceLoopCharacteristics of {}: Sutra throws no \
                         event as iterations complete (`All` or `None` without an event)",
                        ext::one_line(v),
                        describe(el)
                    ),
                )
                .element(el.label()),
            ),
        }
        for attr in ["noneBehaviorEventRef", "oneBehaviorEventRef"] {
            if mi.attr(attr).is_some() {
                self.diags.push(
                    err(
                        Code::BpmnUnsupportedElement,
                        mi,
                        format!(
                            "{attr} on the multiInstanceLoopCharacteristics of {}: Sutra throws no \
                             event as iterations complete (signals are part 2, issue 32)",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
            }
        }
        let mut cardinality = None;
        let mut completion = None;
        for c in mi.bpmn_children() {
            match c.local.as_str() {
                "loopCardinality" => cardinality = self.text_expr(c, el, false),
                "completionCondition" => completion = self.text_expr(c, el, true),
                "extensionElements" | "documentation" => {}
                "loopDataInputRef" | "loopDataOutputRef" | "inputDataItem" | "outputDataItem" => {
                    self.refuse_child(
                        c,
                        el,
                        "BPMN data items are not supported; iterate a collection with \
                         <q:multiInstance collection=\"…\" element=\"…\"/> in its extensionElements",
                    )
                }
                "complexBehaviorDefinition" => self.refuse_child(
                    c,
                    el,
                    "Sutra throws no event as iterations complete",
                ),
                _ => self.refuse_child(c, el, "Sutra does not know this element"),
            }
        }
        let qs = ext::q_elements(mi);
        ext::misplaced(&qs, &["multiInstance"], el, &mut self.diags);
        let q = ext::single(&qs, "multiInstance", el, &mut self.diags);
        let mut collection = None;
        let mut element = None;
        let mut output_collection = None;
        let mut output_element = None;
        let mut max_concurrency = None;
        if let Some(q) = q {
            self.attrs_known(q, el, Q_MI_ATTRS);
            if let Some(v) = q.attr("collection").map(str::trim) {
                collection = self.expr_text(v, "collection", q, el, false);
            }
            let name = |b: &mut Self, attr: &str| -> Option<String> {
                let v = q.attr(attr)?.trim();
                if is_identifier(v) {
                    return Some(v.to_string());
                }
                b.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        q,
                        format!(
                            "{attr}=\"{}\" on q:multiInstance of {}: a variable name (letters, digits, `_`)",
                            ext::one_line(v),
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
                None
            };
            element = name(self, "element");
            output_collection = name(self, "outputCollection");
            if let Some(v) = q.attr("outputElement").map(str::trim) {
                output_element = self.expr_text(v, "outputElement", q, el, false);
            }
            if let Some(v) = q.attr("maxConcurrency").map(str::trim) {
                match v.parse::<u32>() {
                    Ok(n) if n >= 1 => max_concurrency = Some(n),
                    _ => self.diags.push(
                        err(
                            Code::BpmnInvalidAttribute,
                            q,
                            format!(
                                "maxConcurrency=\"{}\" on q:multiInstance of {}: an integer ≥ 1",
                                ext::one_line(v),
                                describe(el)
                            ),
                        )
                        .element(el.label()),
                    ),
                }
            }
            if element.is_some() && q.attr("collection").is_none() {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        q,
                        format!(
                            "q:multiInstance of {} names an `element` but no `collection` to take it from",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
            }
            if output_element.is_some() && output_collection.is_none() {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        q,
                        format!(
                            "q:multiInstance of {} has an `outputElement` but no `outputCollection` to collect it in",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
            }
        }
        let has_card = mi.bpmn_child("loopCardinality").is_some();
        let has_coll = q.is_some_and(|q| q.attr("collection").is_some());
        let over = match (has_card, has_coll) {
            (true, true) => {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        mi,
                        format!(
                            "the multi-instance {} has both a loopCardinality and a q:multiInstance collection: \
                             it repeats over one of them",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
                return None;
            }
            (false, false) => {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        mi,
                        format!(
                            "the multi-instance {} says neither how many times (loopCardinality) nor over \
                             what (<q:multiInstance collection=\"…\"/> in its extensionElements) it repeats",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
                return None;
            }
            (true, false) => Over::Cardinality(cardinality?),
            (false, true) => Over::Collection(collection?),
        };
        let max_concurrency = if sequential {
            if max_concurrency.is_some() {
                self.diags.push(
                    err(
                        Code::BpmnInvalidAttribute,
                        mi,
                        format!(
                            "the sequential multi-instance {} has a maxConcurrency: its iterations run one at a time",
                            describe(el)
                        ),
                    )
                    .element(el.label()),
                );
            }
            1
        } else {
            max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY)
        };
        Some(Repeat {
            over,
            element,
            output_collection,
            output_element,
            completion,
            max_concurrency,
        })
    }

    fn standard_loop(&mut self, lc: &'d Element, el: &'d Element) -> Option<Repeat> {
        self.attrs_known(lc, el, LOOP_ATTRS);
        let test_before = self.boolean(lc, el, "testBefore", false);
        let maximum = match lc.attr("loopMaximum").map(str::trim) {
            None => None,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    self.diags.push(
                        err(
                            Code::BpmnInvalidAttribute,
                            lc,
                            format!(
                                "loopMaximum=\"{}\" on the standardLoopCharacteristics of {}: a non-negative integer",
                                ext::one_line(v),
                                describe(el)
                            ),
                        )
                        .element(el.label()),
                    );
                    return None;
                }
            },
        };
        let mut condition = None;
        for c in lc.bpmn_children() {
            match c.local.as_str() {
                "loopCondition" => condition = Some(self.text_expr(c, el, true)?),
                "extensionElements" | "documentation" => {}
                _ => self.refuse_child(c, el, "Sutra does not know this element"),
            }
        }
        let qs = ext::q_elements(lc);
        ext::misplaced(&qs, &[], el, &mut self.diags);
        if condition.is_none() && maximum.is_none() {
            self.diags.push(
                err(
                    Code::BpmnInvalidAttribute,
                    lc,
                    format!(
                        "the standard loop of {} has neither a loopCondition nor a loopMaximum: it would never end",
                        describe(el)
                    ),
                )
                .element(el.label()),
            );
            return None;
        }
        Some(Repeat {
            over: Over::Loop {
                condition,
                test_before,
                maximum,
            },
            element: None,
            output_collection: None,
            output_element: None,
            completion: None,
            max_concurrency: 1,
        })
    }

    fn synthetic(
        &mut self,
        id: String,
        el: &'d Element,
        scope: Option<NodeIx>,
        kind: NodeKind,
    ) -> NodeIx {
        let ix = NodeIx(self.nodes.len() as u32);
        self.nodes.push(Node {
            ix,
            id,
            name: None,
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

    /// Build activity `el` (a service task, sub-process or call activity,
    /// built into a scope by `inner`) under its loop characteristics, if it
    /// has any (see the module doc).
    pub(super) fn activity(
        &mut self,
        el: &'d Element,
        scope: Option<NodeIx>,
        inner: impl FnOnce(&mut Self, Option<NodeIx>) -> Option<NodeIx>,
    ) {
        let Some(Ok((rep, lc))) = self.loop_characteristics(el) else {
            inner(self, scope);
            return;
        };
        let id = el.id().unwrap_or_default().to_string();
        let body = self.synthetic(
            format!("{id}#body"),
            el,
            scope,
            NodeKind::Fanout(Fanout {
                branches: Vec::new(),
                items: None,
                retries: Vec::new(),
                repeat: Some(Box::new(rep)),
            }),
        );
        self.nodes[body.0 as usize].name = el.attr("name").map(str::to_string);
        let is_sub = el.local == "subProcess";
        let (branch, start) = if is_sub {
            (None, None)
        } else {
            let w = self.synthetic(
                format!("{id}#instance"),
                lc,
                Some(body),
                NodeKind::SubProcess,
            );
            let s = self.synthetic(
                format!("{id}#start"),
                lc,
                Some(w),
                NodeKind::Start(StartTrigger::None),
            );
            (Some(w), Some(s))
        };
        let Some(activity) = inner(self, Some(branch.unwrap_or(body))) else {
            return;
        };
        // A `default` flow of the activity is the body's.
        if let Some(d) = self.pending_defaults.iter_mut().find(|d| **d == activity) {
            *d = body;
        }
        let branch = branch.unwrap_or(activity);
        if let NodeKind::Fanout(f) = &mut self.nodes[body.0 as usize].kind {
            f.branches.push(branch);
        }
        if let Some(s) = start {
            let f = FlowIx(self.flows.len() as u32);
            self.flows.push(Flow {
                ix: f,
                id: format!("{id}#enter"),
                pos: lc.pos,
                source: s,
                target: activity,
                condition: None,
                kind: FlowKind::Sequence,
            });
            self.flow_elements.push(lc);
            self.nodes[s.0 as usize].outgoing.push(f);
            self.nodes[activity.0 as usize].incoming.push(f);
        }
        if !id.is_empty() && self.node_of.get(id.as_str()) == Some(&activity) {
            // Flows and boundary events written for the activity are the body's.
            let key = el.id().unwrap_or_default();
            self.node_of.insert(key, body);
        }
    }
}
