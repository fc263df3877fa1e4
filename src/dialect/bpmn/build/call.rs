//! Call activities: `calledElement` names another process of the same
//! tenant, started as a child instance (`NodeKind::CallProcess`, the
//! machinery the States language's `InvokeFlow` uses). `q:call version`
//! pins a deployment version (else the ACTIVE one runs), `q:io` maps the
//! variables in and out as on a service task, `q:retry` runs a fresh child
//! after a failed one, `q:timeout duration` bounds each child (cancelled
//! when it elapses; the call fails with `SUTRA.RUNTIME.CHILD.TIMEOUT`, which
//! an error boundary naming that code catches once no retry is left). A
//! child that ends with an uncaught BPMN error raises it at the call
//! activity (its error boundaries catch it).

use super::{attr_ref, err, Builder};
use crate::codes::Code;
use crate::dialect::bpmn::events;
use crate::dialect::bpmn::ext::{self, describe};
use crate::dialect::bpmn::xml::{Element, Ns};
use crate::model::{NodeIx, NodeKind};

impl<'d> Builder<'d> {
    pub(super) fn call_activity(
        &mut self,
        el: &'d Element,
        scope: Option<NodeIx>,
    ) -> Option<NodeIx> {
        let process = match attr_ref(el, "calledElement").map(events::strip_qname) {
            None => {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    el,
                    format!(
                        "{} needs a `calledElement`: the id of the process it calls",
                        describe(el)
                    ),
                ));
                String::new()
            }
            Some(name) => {
                if let Some(tag) = self.globals.global_tasks.get(name) {
                    self.diags.push(err(
                        Code::BpmnUnsupportedElement,
                        el,
                        format!(
                            "{} calls {tag} `{name}`: Sutra calls processes, not global tasks",
                            describe(el)
                        ),
                    ));
                }
                name.to_string()
            }
        };
        let qs = ext::q_elements(el);
        ext::misplaced(
            &qs,
            &["io", "retry", "call", "timeout"],
            el,
            &mut self.diags,
        );
        let io = ext::single(&qs, "io", el, &mut self.diags)
            .map(|q| ext::io(q, el, &mut self.diags))
            .unwrap_or_default();
        let retry = ext::single(&qs, "retry", el, &mut self.diags)
            .and_then(|q| ext::retry(q, el, &mut self.diags));
        // `q:timeout duration` bounds each child: when it elapses the child is
        // cancelled and the call fails with SUTRA.RUNTIME.CHILD.TIMEOUT
        // (a fresh child under `q:retry`; once spent, an error boundary whose
        // errorRef names that code catches it, `route_failures`).
        let timeout = ext::single(&qs, "timeout", el, &mut self.diags)
            .and_then(|q| ext::timeout(q, el, false, &mut self.diags))
            .map(|t| t.duration);
        let version = ext::single(&qs, "call", el, &mut self.diags).and_then(|q| {
            for a in q
                .attrs
                .iter()
                .filter(|a| a.ns == Ns::None && a.local != "version")
            {
                self.diags.push(err(
                    Code::BpmnInvalidAttribute,
                    q,
                    format!(
                        "unknown attribute `{}` on q:call of {} (expected: version)",
                        a.qname,
                        describe(el)
                    ),
                ));
            }
            let v = q.attr("version").map(str::trim)?;
            match v.parse::<u32>() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    self.diags.push(err(
                        Code::BpmnInvalidAttribute,
                        q,
                        format!(
                            "version=\"{}\" on q:call of {}: a deployment version, an integer ≥ 1",
                            ext::one_line(v),
                            describe(el)
                        ),
                    ));
                    None
                }
            }
        });
        let ix = self.node(
            el,
            scope,
            NodeKind::CallProcess {
                process,
                retries: retry.into_iter().collect(),
                timeout,
                version,
                io,
                business_errors: true,
            },
        );
        if el.attr("default").is_some() {
            self.pending_defaults.push(ix);
        }
        Some(ix)
    }
}
