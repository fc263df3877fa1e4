//! Conditional events (`CatchTrigger::Condition`, `BoundaryTrigger::Condition`,
//! `StartTrigger::Condition` of an event sub-process): a CEL condition over
//! the variables the token sees.
//!
//! Each waiting conditional event is a **condition park** (a row with no due
//! time and no correlation: the poller never fires it, no message matches
//! it). At the end of every step — once nothing is left to run, so after
//! every change the step made to the variables, whatever made it (a task's
//! output, a message, an operator's edit) — the engine evaluates the
//! condition of each condition park, under the condition budget like a
//! gateway condition. A conditional event fires when its condition
//! **becomes** true: `Snapshot::held` remembers the parks whose condition
//! held at the last evaluation, so a non-interrupting boundary or event
//! sub-process fires once per false → true change, not once per step. A
//! catch, boundary or event sub-process whose condition already holds when
//! it is armed fires in that same step. A condition that cannot be evaluated fails the instance with
//! its code (`SUTRA.RUNTIME.CONDITION.*`).

use super::machine::Machine;
use super::{Park, ParkKind};
use crate::model::{BoundaryTrigger, CatchTrigger, Expr, Node, NodeKind, StartTrigger};
use serde_json::Map;

impl Machine<'_> {
    /// A conditional catch at `token` waits on its condition park; one
    /// whose condition holds already fires at the end of this very step.
    pub(super) fn condition_park(&mut self, token: u64, node: &Node, _c: &Expr) -> Option<u64> {
        Some(self.arm_condition(token, node))
    }

    /// Arm the condition park of `node` for `token`.
    pub(super) fn arm_condition(&mut self, token: u64, node: &Node) -> u64 {
        self.arm(Park {
            kind: ParkKind::Condition,
            token,
            node: node.id.clone(),
            due: None,
            message: None,
            cycle: None,
        })
    }

    /// Evaluate every condition park; fire the first whose condition became
    /// true. Returns whether it fired one (the walk goes on).
    pub(super) fn fire_conditions(&mut self) -> bool {
        if self.snap.state.is_terminal() {
            return false;
        }
        let parks: Vec<(u64, Park)> = self
            .snap
            .parks
            .iter()
            .filter(|(_, p)| p.kind == ParkKind::Condition)
            .map(|(s, p)| (*s, p.clone()))
            .collect();
        self.snap.held.retain(|s| parks.iter().any(|(p, _)| p == s));
        for (seq, park) in parks {
            let Some(node) = self.process.find(&park.node) else {
                continue;
            };
            let cond = match &node.kind {
                NodeKind::Catch(CatchTrigger::Condition(c)) => c,
                NodeKind::Boundary(b) => match &b.trigger {
                    BoundaryTrigger::Condition(c) => c,
                    _ => continue,
                },
                NodeKind::Start(StartTrigger::Condition(c)) => c,
                _ => continue,
            };
            let holds = match cond.eval_bool(&self.vars_of(park.token)) {
                Ok(v) => v,
                Err(e) => {
                    self.fail_code(
                        e.code(),
                        format!("condition of `{}` failed: {e}", node.id),
                        Some(&node.id),
                    );
                    return false;
                }
            };
            if !holds {
                self.snap.held.remove(&seq);
                continue;
            }
            if self.snap.held.contains(&seq) {
                continue;
            }
            let before: Vec<u64> = self.snap.parks.keys().copied().collect();
            self.snap.held.remove(&seq);
            self.park_fired(seq, Map::new());
            // A re-armed (non-interrupting) watch starts out holding: it
            // fires again only after its condition turned false.
            let rearmed: Vec<u64> = self
                .snap
                .parks
                .iter()
                .filter(|(s, p)| {
                    !before.contains(s) && p.kind == ParkKind::Condition && p.node == park.node
                })
                .map(|(s, _)| *s)
                .collect();
            self.snap.held.extend(rearmed);
            return true;
        }
        false
    }
}
