//! JSONata states (`"QueryLanguage": "JSONata"`): every `{% ... %}`
//! expression must be complete on one line and parse, first against the
//! grammar's shape (a position for the common mistakes), then with the
//! JSONata implementation the engine evaluates with (`model::Jsonata`). A
//! malformed one is an invalid definition (`SUTRA.CONFIG.STATES.JSONATA_SYNTAX`);
//! one calling a function Sutra does not provide is
//! `SUTRA.CONFIG.STATES.UNSUPPORTED`, naming the function.
//!
//! A field's value becomes a [`Template`]: each `{% ... %}` string an
//! expression, everything else literal JSON.

use super::json::{Jv, J};
use super::Ctx;
use crate::codes::Code;
use crate::model::{Jsonata, JsonataRefusal, Template, ValueExpr};

/// Fields holding state machines, checked state by state (not as a whole).
const NESTED_MACHINES: &[&str] = &["Branches", "ItemProcessor", "Iterator"];

/// The expression of a `{% ... %}` string (`None`: not one, or refused:
/// [`check`] reports why).
pub fn lift(s: &str) -> Option<Jsonata> {
    let inner = s
        .strip_prefix("{% ")
        .and_then(|r| r.strip_suffix(" %}"))
        .filter(|inner| !inner.contains(['\n', '\r']))?;
    parse(inner).ok()?;
    Jsonata::parse(inner).ok()
}

/// Whether a string is written as a JSONata expression.
pub fn is_expression(s: &str) -> bool {
    s.starts_with("{%") || s.ends_with("%}")
}

/// A JSONata field's value as a template (its diagnostics come from [`check`]).
pub fn template(j: &J) -> Template {
    match &j.v {
        Jv::Str(s) if is_expression(s) => match lift(s) {
            Some(e) => Template::Computed(ValueExpr::Jsonata(e)),
            None => Template::Literal(j.to_value()),
        },
        Jv::Arr(items) => Template::Array(items.iter().map(template).collect()),
        Jv::Obj(props) => Template::Object(
            props
                .iter()
                .map(|(k, v)| (k.name.clone(), template(v)))
                .collect(),
        ),
        _ => Template::Literal(j.to_value()),
    }
}

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
    if NESTED_MACHINES.contains(&field) {
        return;
    }
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
                Some(expr) => match parse(expr).map(|()| Jsonata::parse(expr)) {
                    Err(why) | Ok(Err(JsonataRefusal::Syntax(why))) => cx.err(
                        Code::StatesJsonataSyntax,
                        j.pos,
                        state,
                        format!("`{field}`: the JSONata expression does not parse: {why}"),
                    ),
                    Ok(Err(JsonataRefusal::Unsupported(what))) => {
                        cx.unsupported(j.pos, state, &format!("`{field}`: {what}"))
                    }
                    Ok(Ok(_)) => {}
                },
            }
        }
        Jv::Arr(items) => items.iter().for_each(|i| check(cx, i, state, field)),
        Jv::Obj(props) => props.iter().for_each(|(_, v)| check(cx, v, state, field)),
        _ => {}
    }
}

/// Check a JSONata expression's structure (Sutra does not evaluate JSONata,
/// so this is no full parser): its tokens (numbers, strings, names,
/// `$variables`, regex literals, operators) must alternate operand, operator,
/// operand as JSONata's grammar requires, with brackets balanced. This
/// catches a missing or doubled operand (`10 + * 2`, `420.`), JSONPath
/// filters (`[?(@.price < 10)]`) and unbalanced brackets.
fn parse(expr: &str) -> Result<(), String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    // true: an operand must come next.
    let mut want_operand = true;
    let mut stack: Vec<char> = Vec::new();
    let err = |i: usize, what: &str| Err(format!("{what} at character {}", i + 1));
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            if j + 1 >= chars.len() {
                return err(i, "an unterminated comment");
            }
            i = j + 2;
            continue;
        }
        if want_operand {
            match c {
                '0'..='9' => {
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                    if chars.get(i) == Some(&'.')
                        && chars.get(i + 1).is_some_and(char::is_ascii_digit)
                    {
                        i += 1;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                    if matches!(chars.get(i), Some('e' | 'E')) {
                        i += 1;
                        if matches!(chars.get(i), Some('+' | '-')) {
                            i += 1;
                        }
                        if !chars.get(i).is_some_and(char::is_ascii_digit) {
                            return err(i, "a malformed number");
                        }
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                    want_operand = false;
                }
                '"' | '\'' | '`' => {
                    let q = c;
                    i += 1;
                    loop {
                        match chars.get(i) {
                            None => return err(i, "an unterminated string"),
                            Some('\\') => i += 2,
                            Some(&x) if x == q => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                    want_operand = false;
                }
                '/' => {
                    // A regular expression literal.
                    i += 1;
                    loop {
                        match chars.get(i) {
                            None => return err(i, "an unterminated regular expression"),
                            Some('\\') => i += 2,
                            Some('/') => {
                                i += 1;
                                break;
                            }
                            Some(_) => i += 1,
                        }
                    }
                    while chars.get(i).is_some_and(|c| c.is_ascii_alphabetic()) {
                        i += 1;
                    }
                    want_operand = false;
                }
                '$' | '_' | 'λ' => {
                    i += 1;
                    while chars
                        .get(i)
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                    {
                        i += 1;
                    }
                    want_operand = false;
                }
                c if c.is_alphabetic() => {
                    let start = i;
                    while chars
                        .get(i)
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                    {
                        i += 1;
                    }
                    let word: String = chars[start..i].iter().collect();
                    if matches!(word.as_str(), "and" | "or" | "in") {
                        return err(start, &format!("`{word}` where a value was expected"));
                    }
                    want_operand = false;
                }
                '*' => {
                    i += if chars.get(i + 1) == Some(&'*') { 2 } else { 1 };
                    want_operand = false;
                }
                '%' => {
                    i += 1;
                    want_operand = false;
                }
                '-' => i += 1,
                '(' | '[' | '{' => {
                    stack.push(c);
                    i += 1;
                }
                ')' | ']' | '}'
                    if stack.last() == Some(&opening(c)) && previous_is(&chars, i, opening(c)) =>
                {
                    stack.pop();
                    i += 1;
                    want_operand = false;
                }
                _ => return err(i, &format!("`{c}` where a value was expected")),
            }
        } else {
            match c {
                '(' | '[' | '{' => {
                    stack.push(c);
                    i += 1;
                    want_operand = true;
                }
                ')' | ']' | '}' => {
                    if stack.pop() != Some(opening(c)) {
                        return err(i, &format!("an unbalanced `{c}`"));
                    }
                    i += 1;
                }
                ',' | ';' => {
                    if stack.is_empty() && c == ',' {
                        return err(i, "`,` outside brackets");
                    }
                    i += 1;
                    want_operand = true;
                }
                _ => {
                    let ops = [
                        ":=", "~>", "!=", "<=", ">=", "..", "+", "-", "*", "/", "%", "=", "<", ">",
                        "&", "?", ":", ".", "@", "#", "^",
                    ];
                    let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
                    if let Some(op) = ops.iter().find(|op| rest.starts_with(**op)) {
                        i += op.chars().count();
                        want_operand = true;
                        continue;
                    }
                    if c.is_alphabetic() {
                        let start = i;
                        while chars
                            .get(i)
                            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                        {
                            i += 1;
                        }
                        let word: String = chars[start..i].iter().collect();
                        if matches!(word.as_str(), "and" | "or" | "in") {
                            want_operand = true;
                            continue;
                        }
                        return err(start, &format!("`{word}` where an operator was expected"));
                    }
                    return err(i, &format!("`{c}` where an operator was expected"));
                }
            }
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("an unclosed `{open}`"));
    }
    if want_operand {
        return Err("the expression ends where a value was expected".into());
    }
    Ok(())
}

fn opening(close: char) -> char {
    match close {
        ')' => '(',
        ']' => '[',
        _ => '{',
    }
}

/// Whether the last non-blank character before `i` is `open` (an empty `()`, `[]`, `{}`).
fn previous_is(chars: &[char], i: usize, open: char) -> bool {
    chars[..i].iter().rev().find(|c| !c.is_whitespace()) == Some(&open)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn well_formed_expressions_pass() {
        for ok in [
            "$states.input.data.items",
            "$sum($states.input.numbers)",
            "10 + 2 * 3",
            "$match($states.input.email, /^[a-z]+@[a-z.]+\\.[a-z]{2,}$/) and $x",
            "$not(null in $each($a, function($v) { $length($trim($v)) > 0 ? $v : null }))",
            "($e := $p.email; $p.items[category = 'home']{'c': $e, category: {type: year}})",
            "$uuid()",
            "$p.first & ' ' & $p.last",
            "[1, 2, 3][0]",
            "{}",
            "-1",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
        }
    }

    #[test]
    fn malformed_expressions_fail() {
        for bad in [
            "10 + * 2",
            "420.",
            "$.store.book[?(@.price < 10)].title",
            "(1 + 2",
            "1 + 2)",
            "'open",
            "",
            "1 2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
