//! Load-time checks of what can never succeed at run time (issue 28): an
//! intrinsic call whose literal arguments are of the wrong kind, or whose
//! arguments are all constants and fail when computed; a context-object path
//! (`$$...`) outside the context object's fixed schema, or `$$.Map` outside a
//! Map's item selector and item processor.
//!
//! Each refusal is `Refusal::Invalid` (`SUTRA.CONFIG.STATES.INVALID_PATH`) or,
//! for a context field Sutra does not provide, `Refusal::Unsupported`.

use super::paths::Refusal;
use crate::model::{Arg, Call, DocPath, Intrinsic, PathRoot, Step, ValueExpr};
use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Num,
    Arr,
    Obj,
    Bool,
    Any,
}

impl Kind {
    fn of(v: &Value) -> Kind {
        match v {
            Value::String(_) => Kind::Str,
            Value::Number(_) => Kind::Num,
            Value::Array(_) => Kind::Arr,
            Value::Object(_) => Kind::Obj,
            Value::Bool(_) => Kind::Bool,
            Value::Null => Kind::Any,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Num => "a number",
            Kind::Arr => "an array",
            Kind::Obj => "an object",
            Kind::Bool => "a boolean",
            Kind::Any => "a value",
        }
    }
}

/// What argument `i` of `f` must be.
fn expects(f: Intrinsic, i: usize) -> Kind {
    use Intrinsic::*;
    match (f, i) {
        (Format, 0) | (StringToJson, 0) | (Base64Encode, 0) | (Base64Decode, 0) => Kind::Str,
        (Hash, _) | (StringSplit, _) => Kind::Str,
        (ArrayPartition | ArrayContains | ArrayGetItem | ArrayLength | ArrayUnique, 0) => Kind::Arr,
        (ArrayPartition | ArrayGetItem, 1) => Kind::Num,
        (ArrayRange | MathRandom | MathAdd, _) => Kind::Num,
        (JsonMerge, 0 | 1) => Kind::Obj,
        (JsonMerge, 2) => Kind::Bool,
        _ => Kind::Any,
    }
}

/// What `f` returns.
fn returns(f: Intrinsic) -> Kind {
    use Intrinsic::*;
    match f {
        Format | JsonToString | Base64Encode | Base64Decode | Hash | Uuid => Kind::Str,
        Array | ArrayPartition | ArrayRange | ArrayUnique | StringSplit => Kind::Arr,
        ArrayLength | MathAdd | MathRandom => Kind::Num,
        ArrayContains => Kind::Bool,
        JsonMerge => Kind::Obj,
        StringToJson | ArrayGetItem => Kind::Any,
    }
}

fn invalid(c: &Call, why: impl std::fmt::Display) -> Refusal {
    Refusal::Invalid(format!("{} can never succeed: {why}", c.function.name()))
}

/// Check a computed value: its paths against the context schema, its calls
/// against their arguments.
pub fn expr(e: &ValueExpr, in_map: bool) -> Result<(), Refusal> {
    match e {
        ValueExpr::Path(p) => path(p, in_map),
        ValueExpr::Call(c) => call(c, in_map),
        ValueExpr::Jsonata(_) => Ok(()),
    }
}

fn call(c: &Call, in_map: bool) -> Result<(), Refusal> {
    for (i, a) in c.args.iter().enumerate() {
        let kind = match a {
            Arg::Literal(v) => Kind::of(v),
            Arg::Path(p) => {
                path(p, in_map)?;
                Kind::Any
            }
            Arg::Call(inner) => {
                call(inner, in_map)?;
                returns(inner.function)
            }
        };
        let want = expects(c.function, i);
        if want != Kind::Any && kind != Kind::Any && kind != want {
            return Err(invalid(
                c,
                format!(
                    "argument {} must be {}, not {}",
                    i + 1,
                    want.name(),
                    kind.name()
                ),
            ));
        }
    }
    literal_rules(c)?;
    if let Some(Err(e)) = crate::engine::constant(c) {
        return Err(invalid(c, e.message));
    }
    Ok(())
}

/// Rules on literal arguments that hold whatever the others are.
fn literal_rules(c: &Call) -> Result<(), Refusal> {
    let lit = |i: usize| match c.args.get(i) {
        Some(Arg::Literal(v)) => Some(v),
        _ => None,
    };
    match c.function {
        Intrinsic::Format => {
            if let Some(Value::String(t)) = lit(0) {
                let holes = placeholders(t);
                let given = c.args.len() - 1;
                if holes != given {
                    return Err(invalid(
                        c,
                        format!("the template has {holes} `{{}}` placeholders and {given} arguments follow it"),
                    ));
                }
            }
        }
        Intrinsic::Hash => {
            if let Some(Value::String(a)) = lit(1) {
                if !matches!(
                    a.as_str(),
                    "MD5" | "SHA-1" | "SHA-256" | "SHA-384" | "SHA-512"
                ) {
                    return Err(invalid(
                        c,
                        format!("unknown algorithm {a:?} (MD5, SHA-1, SHA-256, SHA-384, SHA-512)"),
                    ));
                }
            }
        }
        Intrinsic::JsonMerge if lit(2) == Some(&Value::Bool(true)) => {
            return Err(invalid(
                c,
                "only a shallow merge is supported: the third argument must be false",
            ));
        }
        Intrinsic::StringToJson => {
            if let Some(Value::String(s)) = lit(0) {
                if !s.trim().is_empty() && serde_json::from_str::<Value>(s).is_err() {
                    return Err(invalid(c, format!("{s:?} is not JSON")));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The `{}` placeholders of a `States.Format` template (`\{` is literal).
fn placeholders(t: &str) -> usize {
    let mut n = 0;
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '{' if chars.peek() == Some(&'}') => {
                chars.next();
                n += 1;
            }
            _ => {}
        }
    }
    n
}

/// A context-object path's leading names against the context object's
/// schema (the fields Sutra fills: see `engine::docflow::context_of`).
pub fn path(p: &DocPath, in_map: bool) -> Result<(), Refusal> {
    if p.root != PathRoot::Context {
        return Ok(());
    }
    let names = leading_names(p);
    let at = |i: usize| names.get(i).map(String::as_str);
    let nope = |what: &str| {
        Err(Refusal::Invalid(format!(
            "`{}`: the context object has no {what}",
            p.text
        )))
    };
    let unsupported = |what: &str| {
        Err(Refusal::Unsupported(format!(
            "`{}`: the context field {what} is not provided",
            p.text
        )))
    };
    match at(0) {
        None => Ok(()),
        Some("Execution") => match at(1) {
            None | Some("Input") => Ok(()),
            Some("Id" | "Name" | "StartTime") if names.len() == 2 => Ok(()),
            Some("RoleArn" | "RedriveCount" | "RedriveTime") => unsupported(&format!("`Execution.{}`", names[1])),
            Some(n) => nope(&format!("field `Execution.{n}` (Id, Name, StartTime, Input)")),
        },
        Some("StateMachine") => match at(1) {
            None => Ok(()),
            Some("Id" | "Name") if names.len() == 2 => Ok(()),
            Some(n) => nope(&format!("field `StateMachine.{n}` (Id, Name)")),
        },
        Some("State") => match at(1) {
            None => Ok(()),
            Some("Name" | "EnteredTime" | "RetryCount") if names.len() == 2 => Ok(()),
            Some(n) => nope(&format!("field `State.{n}` (Name, EnteredTime, RetryCount)")),
        },
        Some("Map") if !in_map => Err(Refusal::Invalid(format!(
            "`{}`: `$$.Map` exists only in a Map's ItemSelector and in the states of its item processor",
            p.text
        ))),
        Some("Map") => match (at(1), at(2)) {
            (None, _) | (Some("Item"), None | Some("Value")) => Ok(()),
            (Some("Item"), Some("Index")) if names.len() == 3 => Ok(()),
            (Some("Item"), Some(n)) => nope(&format!("field `Map.Item.{n}` (Index, Value)")),
            (Some(n), _) => nope(&format!("field `Map.{n}` (Item)")),
        },
        Some("Task") => unsupported("`Task` (task tokens)"),
        Some(n) => nope(&format!(
            "field `{n}` (Execution, StateMachine, State, Map)"
        )),
    }
}

/// The names a path starts with (up to its first step that is no name).
fn leading_names(p: &DocPath) -> Vec<String> {
    if let Some(steps) = &p.steps {
        return steps
            .iter()
            .map_while(|s| match s {
                Step::Key(k) => Some(k.clone()),
                Step::Index(_) => None,
            })
            .collect();
    }
    // A query: `$$.A.B[*]...` — the plain dotted names before anything else.
    let rest = p.text.trim_start_matches('$');
    let mut out = Vec::new();
    for seg in rest.split('.').skip(1) {
        let name: String = seg
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        let whole = name.len() == seg.len();
        out.push(name);
        if !whole {
            break;
        }
    }
    out
}
