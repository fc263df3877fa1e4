//! Escalation events (throw: intermediate and end; catch: boundary, and the
//! start of an event sub-process), and the refusals with a code of their
//! own: a conditional start of a process, transaction sub-processes and
//! cancel events.
//!
//! An escalation is named by its `escalationCode` (else the escalation
//! element's id); a catcher without `escalationRef` catches any.

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::events::{self, Def};
use crate::dialect::bpmn::ext::describe;
use crate::dialect::bpmn::xml::Element;
use crate::model::NodeIx;

/// The code an event definition Sutra does not run here is refused with:
/// conditional and cancel events have codes of their own (docs/bpmn.md).
pub(super) fn refusal_code(def: Def<'_>) -> Code {
    match def {
        Def::Conditional(_) => Code::BpmnConditionalUnsupported,
        Def::Unsupported(d, _) if d.local == "cancelEventDefinition" => {
            Code::BpmnTransactionUnsupported
        }
        _ => Code::BpmnUnsupportedElement,
    }
}

impl<'d> Builder<'d> {
    /// The code a throw event escalates with: its `escalationRef` is required.
    pub(super) fn thrown_escalation(&mut self, def: &Element, el: &Element) -> String {
        match events::escalation_code(def, el, self.globals) {
            Ok(Some(code)) => code,
            Ok(None) => {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    def,
                    format!(
                        "the escalation definition of {} needs an `escalationRef`: a throw names the escalation it raises",
                        describe(el)
                    ),
                ).element(el.label()));
                String::new()
            }
            Err(e) => {
                self.diags.push(e);
                String::new()
            }
        }
    }

    /// The codes a catcher takes (`None`: any escalation).
    pub(super) fn caught_escalation(&mut self, def: &Element, el: &Element) -> Option<Vec<String>> {
        match events::escalation_code(def, el, self.globals) {
            Ok(found) => found.map(|c| vec![c]),
            Err(e) => {
                self.diags.push(e);
                None
            }
        }
    }

    /// A transaction sub-process: refused with its own code (docs/bpmn.md:
    /// its cancel semantics need a transaction protocol Sutra does not have).
    pub(super) fn refuse_transaction(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        self.diags.push(err(
            Code::BpmnTransactionUnsupported,
            el,
            format!(
                "{} cannot be executed by Sutra: transaction sub-processes and cancel events are not supported \
                 (model the rollback with compensation: compensation boundary events, handlers and a compensate throw)",
                describe(el)
            ),
        ));
        self.placeholder(el, scope);
    }
}
