//! The States-language JSON dialect (seed 004): a state machine in the style
//! of the Amazon States Language, compiled into the IR.
//!
//! - `json`: strict JSON with positions; size, depth and duplicate keys refused;
//! - `paths`: JSONPath, intrinsic calls and payload templates;
//! - `checks`: what can never succeed (intrinsics over bad literals, context paths
//!   outside the context object), refused at load;
//! - `rules`: Choice rules;
//! - `build`: machines, branches and transitions into nodes and flows;
//! - `states`: each state type's fields into nodes, data flows, retriers and catchers;
//! - `map`: the Map state (items, concurrency, failure tolerance);
//! - `assign`: `Assign` (both query languages), JSONata `Output` and choice `Condition`;
//! - `jsonata`: `{% ... %}` expressions checked and turned into templates.
//!
//! Every refusal is a diagnostic with a stable code and line:column: one of
//! the `SUTRA.CONFIG.STATES.*` codes for an invalid definition, or
//! `SUTRA.CONFIG.STATES.UNSUPPORTED` (naming the field) for well-formed
//! States language that Sutra does not run. Never panics.

mod assign;
mod build;
mod checks;
mod handlers;
// The HTTP Task's resource and request fields (issue 31).
mod http;
mod json;
mod jsonata;
mod map;
mod paths;
mod rules;
mod states;

use super::Loaded;
use crate::codes::Code;
use crate::diag::{Diagnostic, Pos};
use crate::model::{Definitions, DocPath};
use json::J;
use paths::Refusal;

/// Diagnostics being collected.
pub(crate) struct Ctx {
    pub diags: Vec<Diagnostic>,
    /// Building a Map's item selector or item processor (where `$$.Map` exists).
    pub in_map: bool,
}

impl Ctx {
    pub fn err(&mut self, code: Code, pos: Pos, element: &str, message: impl Into<String>) {
        let mut d = Diagnostic::error(code, message).at(pos);
        if !element.is_empty() {
            d = d.element(element);
        }
        self.diags.push(d);
    }

    /// Well-formed but not supported: `what` names the feature.
    pub fn unsupported(&mut self, pos: Pos, element: &str, what: &str) {
        self.err(
            Code::StatesUnsupported,
            pos,
            element,
            format!("{what} is not supported by Sutra"),
        );
    }

    pub fn refusal(&mut self, r: Refusal, pos: Pos, element: &str, field: &str) {
        match r {
            Refusal::Invalid(m) => self.err(
                Code::StatesInvalidPath,
                pos,
                element,
                format!("`{field}`: {m}"),
            ),
            Refusal::Unsupported(m) => self.err(
                Code::StatesUnsupported,
                pos,
                element,
                format!("`{field}`: {m} by Sutra"),
            ),
        }
    }

    /// A field that holds a path.
    pub fn path_field(&mut self, j: &J, element: &str, field: &str) -> Option<DocPath> {
        let Some(text) = j.as_str() else {
            self.err(
                Code::StatesInvalidField,
                j.pos,
                element,
                format!("`{field}` must be a path string, not {}", j.kind()),
            );
            return None;
        };
        match paths::path(text).and_then(|p| checks::path(&p, self.in_map).map(|()| p)) {
            Ok(p) => Some(p),
            Err(r) => {
                self.refusal(r, j.pos, element, field);
                None
            }
        }
    }
}

/// Load a States-language document. Never panics; every problem is a diagnostic.
pub fn load(source: &str) -> Loaded {
    let text = source.trim_start_matches('\u{feff}');
    let root = match json::parse(text) {
        Ok(j) => j,
        Err(diags) => {
            return Loaded {
                definitions: Definitions {
                    processes: Vec::new(),
                },
                diagnostics: diags,
            }
        }
    };
    let mut cx = Ctx {
        diags: Vec::new(),
        in_map: false,
    };
    let process = build::process(&mut cx, &root);
    let mut diagnostics = cx.diags;
    diagnostics.sort_by_key(|d| (d.line, d.column));
    let ok = !diagnostics.iter().any(Diagnostic::is_error);
    Loaded {
        definitions: Definitions {
            processes: match process {
                Some(p) if ok => vec![p],
                _ => Vec::new(),
            },
        },
        diagnostics,
    }
}

#[cfg(test)]
mod tests;
