//! Variables scopes: a multi-instance iteration (its branch token, see
//! `model::Repeat`) holds variables of its own in `Token::vars`. A token
//! reads the instance's variables overlaid by every such scope it runs in
//! (the innermost wins) and writes into the innermost one, else into the
//! instance's variables. Tokens outside any iteration read and write the
//! instance's variables as before, with no copy.
//!
//! A standard loop's iteration (a branch token without variables of its
//! own: a loop works in the enclosing variables) shows the tokens inside it
//! one read-only variable, `loopCounter` (1-based, the iteration's number),
//! as BPMN's loop activity instance attribute: a task or condition in the
//! body reads it, a write goes to the enclosing scope as any other.

use super::machine::Machine;
use super::snapshot::{Token, TokenStatus};
use serde_json::{json, Map, Value};
use std::borrow::Cow;

impl<'a> Machine<'a> {
    /// The `loopCounter` a standard loop's iteration token `t` shows the
    /// tokens inside it (`None` for any other token).
    fn loop_counter(&self, t: &Token) -> Option<Value> {
        if t.vars.is_some() {
            return None;
        }
        let TokenStatus::Branch { slot, .. } = t.status else {
            return None;
        };
        let (_, _, rep) = self.repeat_of(t.scope?)?;
        (!rep.scoped()).then(|| json!(slot + 1))
    }

    /// `t`'s own variables layer, if it has one (see the module doc).
    fn layer_of<'t>(&self, t: &'t Token) -> Option<Cow<'t, Map<String, Value>>> {
        if let Some(v) = &t.vars {
            return Some(Cow::Borrowed(v));
        }
        let n = self.loop_counter(t)?;
        let mut m = Map::new();
        m.insert(super::repeat::LOOP_COUNTER.into(), n);
        Some(Cow::Owned(m))
    }

    /// The variables visible to `token` (see the module doc).
    pub(super) fn vars_of(&self, token: u64) -> Cow<'_, Map<String, Value>> {
        let mut layers = Vec::new();
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if let Some(v) = self.layer_of(t) {
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

    /// The variables named `names` as `token` sees them (what an
    /// expression naming them needs, without copying the others).
    pub(super) fn vars_named(&self, token: u64, names: &[String]) -> Map<String, Value> {
        let mut out = Map::new();
        for name in names {
            let mut cur = self.snap.token(token);
            let mut found = None;
            while let Some(t) = cur {
                if let Some(v) = t.vars.as_ref().and_then(|v| v.get(name)) {
                    found = Some(v.clone());
                    break;
                }
                if name == super::repeat::LOOP_COUNTER {
                    if let Some(n) = self.loop_counter(t) {
                        found = Some(n);
                        break;
                    }
                }
                cur = t.scope.and_then(|s| self.snap.token(s));
            }
            if let Some(v) = found.or_else(|| self.snap.variables.get(name).cloned()) {
                out.insert(name.clone(), v);
            }
        }
        out
    }

    /// The value at variable path `path` (`$.a.b`) as `token` sees it,
    /// without building the merged variables unless the path is `$`.
    pub(super) fn vars_get(&self, token: u64, path: &str) -> Result<Value, String> {
        let segs = crate::model::var_path_segments(path)?;
        let Some(first) = segs.first() else {
            return super::vars::get(&self.vars_of(token), path);
        };
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if let Some(v) = t.vars.as_ref().filter(|v| v.contains_key(*first)) {
                return super::vars::get(v, path);
            }
            if *first == super::repeat::LOOP_COUNTER {
                if let Some(v) = self.layer_of(t) {
                    return super::vars::get(&v, path);
                }
            }
            cur = t.scope.and_then(|s| self.snap.token(s));
        }
        super::vars::get(&self.snap.variables, path)
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
