//! Receive and send tasks (issue 29 item 5).
//!
//! A receive task waits for a message like a message intermediate catch
//! event (`NodeKind::Catch`), with its `messageRef` on the task and an
//! optional `q:correlation`; boundary events attach to it as to any
//! activity. `instantiate="true"` (a receive task starting the process) is
//! refused: use a message start event. A send task throws its message
//! (`NodeKind::Throw`): delivered after the step's commit to a waiting
//! instance of the tenant whose message name and correlation key match,
//! else to the message starts of the tenant's ACTIVE processes; nobody
//! waiting is no error (BPMN).

use super::{err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::xml::Element;
use crate::model::{CatchTrigger, NodeIx, NodeKind, Throw};

impl<'d> Builder<'d> {
    pub(super) fn receive_task(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        if el.attr("instantiate").map(str::trim) == Some("true") {
            self.diags.push(err(
                Code::BpmnUnsupportedElement,
                el,
                format!(
                    "{} has instantiate=\"true\": a receive task does not start a process in Sutra; use a message start event",
                    describe(el)
                ),
            ));
            self.placeholder(el, scope);
            return;
        }
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &["correlation"], el, &mut self.diags);
        let m = self.message_ref(el, el, &qs);
        self.node(el, scope, NodeKind::Catch(CatchTrigger::Message(m)));
    }

    pub(super) fn send_task(&mut self, el: &'d Element, scope: Option<NodeIx>) {
        let qs = ext::q_elements(el);
        ext::misplaced(&qs, &["correlation", "io"], el, &mut self.diags);
        let m = self.message_ref(el, el, &qs);
        let payload = self.throw_payload(el, &qs);
        self.node(
            el,
            scope,
            NodeKind::Throw(vec![Throw::Message {
                name: m.name,
                correlation_key: m.correlation_key,
                payload,
            }]),
        );
    }
}
