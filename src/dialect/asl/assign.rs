//! What a state of either query language may carry besides its type's
//! fields: `Assign` (variables; names checked and recorded for the scope
//! check in `build`), JSONata's `Output`, a JSONata choice rule's
//! `Condition`, and the JSONata expressions Sutra refuses where it takes
//! only a number.

use super::json::J;
use super::states::St;
use super::{jsonata, paths};
use crate::codes::Code;
use crate::model::{DataFlow, Expr, Template};

impl St<'_, '_, '_> {
    /// What every state's data flow may have besides: JSONata's `Output`,
    /// and `Assign` (both query languages).
    pub(super) fn extras(&mut self, df: &mut DataFlow) {
        df.jsonata = self.jsonata;
        if self.jsonata {
            df.output_template = self.get("Output").map(jsonata::template);
        }
        let j = self.get("Assign").cloned();
        df.assign = j.and_then(|j| self.assign(&j));
    }

    /// An `Assign` object: its names checked (and recorded for the scope
    /// check), its values a template in the state's query language.
    pub(super) fn assign(&mut self, j: &J) -> Option<Template> {
        let Some(obj) = j.as_obj() else {
            self.err(
                Code::StatesInvalidField,
                j.pos,
                format!("`Assign` must be an object of variables, not {}", j.kind()),
            );
            return None;
        };
        let mut ok = true;
        for (k, _) in obj {
            let name = if self.jsonata {
                k.name.as_str()
            } else {
                paths::template_key(&k.name).0
            };
            let valid = name.len() <= 80
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid || name == "states" {
                ok = false;
                self.err(
                    Code::StatesInvalidField,
                    k.pos,
                    format!(
                        "`Assign`: `{name}` is no variable name (a letter or `_`, then letters, digits or `_`, at most 80; `states` is reserved)"
                    ),
                );
                continue;
            }
            self.b
                .assigns
                .push((self.scope, name.to_string(), k.pos, self.name.to_string()));
        }
        if !ok {
            return None;
        }
        if self.jsonata {
            Some(jsonata::template(j))
        } else {
            paths::template(self.b.cx, j, self.name, "Assign", 0)
        }
    }

    /// A JSONata expression where Sutra takes only a literal: refused, naming the field.
    pub(super) fn literal_only(&mut self, v: &J, field: &str) -> bool {
        match v.as_str() {
            Some(s) if self.jsonata && jsonata::is_expression(s) => {
                self.b.cx.unsupported(
                    v.pos,
                    self.name,
                    &format!("`{field}` as a JSONata expression (write a number)"),
                );
                false
            }
            _ => true,
        }
    }

    /// A JSONata choice rule's `Condition`.
    pub(super) fn condition(&mut self, item: &J) -> Option<Expr> {
        let Some(obj) = item.as_obj() else {
            self.err(
                Code::StatesInvalidField,
                item.pos,
                "a choice rule must be an object",
            );
            return None;
        };
        for (k, _) in obj {
            match k.name.as_str() {
                "Condition" | "Next" | "Comment" => {}
                "Assign" | "Output" => self.b.cx.unsupported(
                    k.pos,
                    self.name,
                    "`Assign`/`Output` on a choice rule (set them on the Choice state)",
                ),
                other => self.err(
                    Code::StatesUnknownField,
                    k.pos,
                    format!("a JSONata choice rule has no field `{other}`"),
                ),
            }
        }
        match item.get("Condition") {
            None => {
                self.err(
                    Code::StatesMissingField,
                    item.pos,
                    "a JSONata choice rule needs `Condition`",
                );
                None
            }
            Some(c) => match c.as_str() {
                Some(s) if jsonata::is_expression(s) => jsonata::lift(s).map(Expr::jsonata),
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        c.pos,
                        "`Condition` must be a JSONata expression `{% ... %}`",
                    );
                    None
                }
            },
        }
    }
}
