//! Variables scopes: a multi-instance iteration (its branch token, see
//! `model::Repeat`) holds variables of its own in `Token::vars`. A token
//! reads the instance's variables overlaid by every such scope it runs in
//! (the innermost wins) and writes into the innermost one, else into the
//! instance's variables. Tokens outside any iteration read and write the
//! instance's variables as before, with no copy.

use super::machine::Machine;
use serde_json::{Map, Value};
use std::borrow::Cow;

impl<'a> Machine<'a> {
    /// The variables visible to `token` (see the module doc).
    pub(super) fn vars_of(&self, token: u64) -> Cow<'_, Map<String, Value>> {
        let mut layers = Vec::new();
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if let Some(v) = &t.vars {
                layers.push(v);
            }
            cur = t.scope.and_then(|s| self.snap.token(s));
        }
        if layers.is_empty() {
            return Cow::Borrowed(&self.snap.variables);
        }
        let mut all = self.snap.variables.clone();
        for layer in layers.into_iter().rev() {
            all.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Cow::Owned(all)
    }

    /// The token whose scope `token` writes to (`None`: the instance's variables).
    fn home_of(&self, token: u64) -> Option<u64> {
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if t.vars.is_some() {
                return Some(t.id);
            }
            cur = t.scope.and_then(|s| self.snap.token(s));
        }
        None
    }

    /// The variables `token` writes to (see the module doc).
    pub(super) fn vars_home(&mut self, token: u64) -> &mut Map<String, Value> {
        self.vars_home_in(Some(token))
    }

    /// The variables a token spawned in `scope` writes to.
    pub(super) fn vars_home_in(&mut self, scope: Option<u64>) -> &mut Map<String, Value> {
        match scope.and_then(|s| self.home_of(s)) {
            Some(h) => {
                let i = self.snap.tokens.iter().position(|t| t.id == h);
                match i.and_then(|i| self.snap.tokens[i].vars.as_mut()) {
                    Some(v) => v,
                    None => &mut self.snap.variables,
                }
            }
            None => &mut self.snap.variables,
        }
    }
}
