//! Variables (`Assign`, the States language's workflow variables): each
//! scope's assignments live in the snapshot (`Snapshot::assigned`, keyed by
//! the scope's token: 0 for the top level, a branch token for a Parallel
//! branch or a Map iteration), so they are durable like the rest of it.
//!
//! A node sees its own scope's variables over those of the scopes around
//! it, and assigns only in its own: a branch reads the outer variables and
//! never changes them (the loader refuses assigning an outer name inside a
//! branch, as Step Functions does). A branch's variables go with its token.

use super::document::VARS_KEY;
use super::machine::Machine;
use super::snapshot::TokenStatus;
use serde_json::{json, Map, Value};

impl Machine<'_> {
    /// The scopes around `token`, innermost first (0, the top level, last).
    fn var_scopes(&self, token: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut cur = Some(token);
        while let Some(id) = cur {
            let Some(t) = self.snap.token(id) else {
                break;
            };
            if matches!(t.status, TokenStatus::Branch { .. }) {
                out.push(id);
            }
            cur = t.scope;
        }
        out.push(0);
        out
    }

    /// The variables `token` sees (`None` when there are none).
    pub(super) fn visible_vars(&self, token: u64) -> Option<Map<String, Value>> {
        if self.snap.assigned.is_empty() {
            return None;
        }
        let mut vars = Map::new();
        for s in self.var_scopes(token).into_iter().rev() {
            if let Some(m) = self.snap.assigned.get(&s) {
                vars.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        (!vars.is_empty()).then_some(vars)
    }

    /// Put the variables `token` sees into a context object.
    pub(super) fn with_vars(&self, token: u64, context: &mut Value) {
        if let (Some(vars), Value::Object(c)) = (self.visible_vars(token), context) {
            c.insert(VARS_KEY.into(), Value::Object(vars));
        }
    }

    /// `token`'s node assigned `vars` (in its own scope).
    pub(super) fn assign_vars(&mut self, token: u64, node: &str, vars: Option<Map<String, Value>>) {
        let Some(vars) = vars else {
            return;
        };
        let scope = self.var_scopes(token)[0];
        journal!(
            self,
            "variables_assigned",
            Some(node),
            json!({ "names": vars.keys().collect::<Vec<_>>() })
        );
        self.snap.assigned.entry(scope).or_default().extend(vars);
    }
}
