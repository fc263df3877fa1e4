//! Paths, intrinsic function calls and payload templates of the States
//! language, parsed into `model::document` types.
//!
//! JSONPath itself is parsed and evaluated by `serde_json_path` (RFC 9535);
//! this file only splits off the `$$` (context) root, recognises reference
//! paths (name and index steps only, which can be written to), and rewrites
//! the Jayway-style dotted names RFC 9535 refuses (`$.input-foo`) to bracket
//! notation before handing the text over.

use super::json::{Jv, J};
use crate::codes::Code;
use crate::model::{Arg, Call, DocPath, Intrinsic, PathRoot, Step, Template, ValueExpr};
use std::sync::Arc;

/// Why a path, call or template was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed: an invalid definition.
    Invalid(String),
    /// Well-formed but not supported by Sutra (the feature is named).
    Unsupported(String),
}

type R<T> = Result<T, Refusal>;

fn invalid<T>(m: impl Into<String>) -> R<T> {
    Err(Refusal::Invalid(m.into()))
}

/// The deepest nesting of intrinsic calls accepted.
const MAX_CALL_DEPTH: usize = 16;

/// Parse a path (`$...` or `$$...`).
pub fn path(text: &str) -> R<DocPath> {
    let (root, rest) = if let Some(r) = text.strip_prefix("$$") {
        (PathRoot::Context, r)
    } else if let Some(r) = text.strip_prefix('$') {
        (PathRoot::Document, r)
    } else {
        return invalid(format!("`{text}` is not a path: a path starts with `$`"));
    };
    if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        // `$name...`: a variable (`Assign`); the path runs over the
        // variables with the name as its first step.
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, tail) = rest.split_at(end);
        if name == "states" {
            return invalid(format!(
                "`{text}`: `$states` exists only in JSONata expressions"
            ));
        }
        let mut p = path(&format!("$.{name}{tail}"))?;
        p.text = text.to_string();
        p.root = PathRoot::Variables;
        return Ok(p);
    }
    if rest.contains("[(") {
        return Err(Refusal::Unsupported(format!(
            "`{text}` uses a JSONPath script expression `[(...)]`: not supported"
        )));
    }
    let steps = reference_steps(rest);
    let normalized = match &steps {
        Some(steps) => {
            let mut s = String::from("$");
            for step in steps {
                match step {
                    Step::Key(k) => {
                        s.push_str("['");
                        for c in k.chars() {
                            match c {
                                '\'' | '\\' => {
                                    s.push('\\');
                                    s.push(c);
                                }
                                c if (c as u32) < 0x20 => {
                                    s.push_str(&format!("\\u{:04x}", c as u32))
                                }
                                c => s.push(c),
                            }
                        }
                        s.push_str("']");
                    }
                    Step::Index(i) => s.push_str(&format!("[{i}]")),
                }
            }
            s
        }
        None => format!("${}", bracket_odd_names(rest)),
    };
    let query = serde_json_path::JsonPath::parse(&normalized)
        .map_err(|e| Refusal::Invalid(format!("`{text}` is not a valid JSONPath: {e}")))?;
    Ok(DocPath {
        text: text.to_string(),
        root,
        steps,
        query: Arc::new(query),
    })
}

/// A reference path: `$.a.b`, `$['a'][0]`, `$.a[-1]` (a place that can be
/// written to). `None` when `rest` (after `$`) is anything else.
fn reference_steps(rest: &str) -> Option<Vec<Step>> {
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name.is_empty() || name == "*" || name.chars().any(|c| c.is_whitespace()) {
                    return None;
                }
                steps.push(Step::Key(name));
            }
            '[' => {
                i += 1;
                match chars.get(i)? {
                    q @ ('\'' | '"') => {
                        let q = *q;
                        i += 1;
                        let mut name = String::new();
                        loop {
                            match chars.get(i)? {
                                // Jayway (and so Step Functions): `\'` is the quote,
                                // `\\` a backslash; any other backslash is itself.
                                '\\' => {
                                    let n = *chars.get(i + 1)?;
                                    if n == q || n == '\\' {
                                        name.push(n);
                                        i += 2;
                                    } else {
                                        name.push('\\');
                                        i += 1;
                                    }
                                }
                                c if *c == q => {
                                    i += 1;
                                    break;
                                }
                                c => {
                                    name.push(*c);
                                    i += 1;
                                }
                            }
                        }
                        if chars.get(i) != Some(&']') {
                            return None;
                        }
                        i += 1;
                        steps.push(Step::Key(name));
                    }
                    _ => {
                        let start = i;
                        while i < chars.len() && chars[i] != ']' {
                            i += 1;
                        }
                        let n: String = chars[start..i].iter().collect();
                        if i >= chars.len() {
                            return None;
                        }
                        i += 1;
                        let ok = !n.is_empty()
                            && n.trim_start_matches('-')
                                .chars()
                                .all(|c| c.is_ascii_digit())
                            && !n.trim_start_matches('-').is_empty();
                        if !ok {
                            return None;
                        }
                        steps.push(Step::Index(n.parse().ok()?));
                    }
                }
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// Rewrite `.name` segments whose name RFC 9535 shorthand refuses (a hyphen,
/// ...) to `['name']`, outside brackets and quotes.
fn bracket_odd_names(rest: &str) -> String {
    let chars: Vec<char> = rest.chars().collect();
    let mut out = String::new();
    let (mut depth, mut quote) = (0usize, None::<char>);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                    i += 1;
                }
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0
                && chars.get(i + 1) != Some(&'.')
                && (i == 0 || chars[i - 1] != '.') =>
            {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && !matches!(chars[j], '.' | '[' | ' ') {
                    j += 1;
                }
                let name: String = chars[start..j].iter().collect();
                let plain = name == "*"
                    || name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii());
                if !name.is_empty() && !plain {
                    out.push_str(&format!(
                        "['{}']",
                        name.replace('\\', "\\\\").replace('\'', "\\'")
                    ));
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Parse the value of a `key.$` field: a path, or an intrinsic call.
pub fn value_expr(text: &str) -> R<ValueExpr> {
    let t = text.trim();
    if t.starts_with('$') {
        path(t).map(ValueExpr::Path)
    } else if t.starts_with("States.") {
        call(t).map(ValueExpr::Call)
    } else {
        invalid(format!(
            "`{text}` is neither a path (`$...`) nor an intrinsic function call (`States.Format(...)`)"
        ))
    }
}

/// Parse an intrinsic function call.
pub fn call(text: &str) -> R<Call> {
    let mut p = CallParser {
        s: text.chars().collect(),
        i: 0,
        text,
    };
    let c = p.call(0)?;
    p.ws();
    if p.i != p.s.len() {
        return invalid(format!("`{text}`: unexpected text after the call"));
    }
    Ok(c)
}

struct CallParser<'a> {
    s: Vec<char>,
    i: usize,
    text: &'a str,
}

impl CallParser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_whitespace()) {
            self.i += 1;
        }
    }

    fn err<T>(&self, why: &str) -> R<T> {
        invalid(format!(
            "`{}`: {why} at character {}",
            self.text,
            self.i + 1
        ))
    }

    fn call(&mut self, depth: usize) -> R<Call> {
        if depth > MAX_CALL_DEPTH {
            return self.err("intrinsic calls nest too deep");
        }
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
        {
            self.i += 1;
        }
        let name: String = self.s[start..self.i].iter().collect();
        let Some(function) = Intrinsic::parse(&name) else {
            return invalid(format!(
                "`{}`: `{name}` is not an intrinsic function",
                self.text
            ));
        };
        self.ws();
        if self.s.get(self.i) != Some(&'(') {
            return self.err("expected `(`");
        }
        self.i += 1;
        let mut args = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&')') {
            self.i += 1;
        } else {
            loop {
                self.ws();
                args.push(self.arg(depth)?);
                self.ws();
                match self.s.get(self.i) {
                    Some(',') => self.i += 1,
                    Some(')') => {
                        self.i += 1;
                        break;
                    }
                    _ => return self.err("expected `,` or `)`"),
                }
            }
        }
        let (min, max) = function.arity();
        if args.len() < min || max.is_some_and(|m| args.len() > m) {
            return invalid(format!(
                "`{}`: {} takes {}{} arguments, not {}",
                self.text,
                function.name(),
                min,
                match max {
                    Some(m) if m == min => String::new(),
                    Some(m) => format!(" to {m}"),
                    None => " or more".into(),
                },
                args.len()
            ));
        }
        Ok(Call { function, args })
    }

    fn arg(&mut self, depth: usize) -> R<Arg> {
        match self.s.get(self.i) {
            Some('\'') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    match self.s.get(self.i) {
                        None => return self.err("unterminated string"),
                        Some('\\') => {
                            match self.s.get(self.i + 1) {
                                Some(c @ ('\'' | '\\')) => out.push(*c),
                                // `\{` `\}` stay escaped: States.Format reads them.
                                Some(c) => {
                                    out.push('\\');
                                    out.push(*c);
                                }
                                None => return self.err("unterminated string"),
                            }
                            self.i += 2;
                        }
                        Some('\'') => {
                            self.i += 1;
                            break;
                        }
                        Some(c) => {
                            out.push(*c);
                            self.i += 1;
                        }
                    }
                }
                Ok(Arg::Literal(serde_json::Value::String(out)))
            }
            Some('$') => {
                let start = self.i;
                let (mut depth_b, mut quote) = (0usize, None::<char>);
                while let Some(&c) = self.s.get(self.i) {
                    if let Some(q) = quote {
                        if c == '\\' {
                            self.i += 1;
                        } else if c == q {
                            quote = None;
                        }
                    } else {
                        match c {
                            '\'' | '"' if depth_b > 0 => quote = Some(c),
                            '[' | '(' => depth_b += 1,
                            ']' => depth_b = depth_b.saturating_sub(1),
                            ')' if depth_b == 0 => break,
                            ')' => depth_b -= 1,
                            ',' if depth_b == 0 => break,
                            _ => {}
                        }
                    }
                    self.i += 1;
                }
                let text: String = self.s[start..self.i].iter().collect();
                path(text.trim()).map(Arg::Path)
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
                {
                    self.i += 1;
                }
                let word: String = self.s[start..self.i].iter().collect();
                match word.as_str() {
                    "null" => Ok(Arg::Literal(serde_json::Value::Null)),
                    "true" => Ok(Arg::Literal(serde_json::Value::Bool(true))),
                    "false" => Ok(Arg::Literal(serde_json::Value::Bool(false))),
                    _ => {
                        self.i = start;
                        self.call(depth + 1).map(Arg::Call)
                    }
                }
            }
            Some(c) if c.is_ascii_digit() || *c == '-' => {
                let start = self.i;
                self.i += 1;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
                {
                    self.i += 1;
                }
                let text: String = self.s[start..self.i].iter().collect();
                match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(v @ serde_json::Value::Number(_)) => Ok(Arg::Literal(v)),
                    _ => invalid(format!("`{}`: `{text}` is not a number", self.text)),
                }
            }
            _ => self.err("expected an argument"),
        }
    }
}

/// Stripped `.$` keys clash with literal keys (`a` and `a.$` in one object).
pub fn template_key(key: &str) -> (&str, bool) {
    match key.strip_suffix(".$") {
        Some(k) => (k, true),
        None => (key, false),
    }
}

/// A payload template: `key.$` values are paths or intrinsic calls.
pub fn template(
    cx: &mut super::Ctx,
    j: &J,
    state: &str,
    field: &str,
    depth: usize,
) -> Option<Template> {
    if depth > super::json::MAX_DEPTH {
        cx.err(
            Code::StatesLimitExceeded,
            j.pos,
            state,
            format!(
                "`{field}` nests deeper than {} levels",
                super::json::MAX_DEPTH
            ),
        );
        return None;
    }
    Some(match &j.v {
        Jv::Obj(props) => {
            let mut out: Vec<(String, Template)> = Vec::new();
            let mut ok = true;
            for (k, v) in props {
                let (key, computed) = template_key(&k.name);
                if out.iter().any(|(o, _)| o == key) {
                    cx.err(
                        Code::StatesDuplicateKey,
                        k.pos,
                        state,
                        format!("`{field}`: the key `{key}` appears twice once `.$` is removed"),
                    );
                    ok = false;
                    continue;
                }
                let t = if computed {
                    let Some(text) = v.as_str() else {
                        cx.err(
                            Code::StatesInvalidPath,
                            v.pos,
                            state,
                            format!(
                                "`{field}`: `{}` must be a path or an intrinsic call",
                                k.name
                            ),
                        );
                        ok = false;
                        continue;
                    };
                    match value_expr(text)
                        .and_then(|e| super::checks::expr(&e, cx.in_map).map(|()| e))
                    {
                        Ok(e) => Template::Computed(e),
                        Err(r) => {
                            cx.refusal(r, v.pos, state, field);
                            ok = false;
                            continue;
                        }
                    }
                } else {
                    match template(cx, v, state, field, depth + 1) {
                        Some(t) => t,
                        None => {
                            ok = false;
                            continue;
                        }
                    }
                };
                out.push((key.to_string(), t));
            }
            if !ok {
                return None;
            }
            Template::Object(out)
        }
        Jv::Arr(items) => {
            let mut out = Vec::new();
            for i in items {
                out.push(template(cx, i, state, field, depth + 1)?);
            }
            Template::Array(out)
        }
        _ => Template::Literal(j.to_value()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reference_paths_and_queries() {
        let p = path("$.a['b c'][-1]").unwrap();
        assert_eq!(
            p.steps,
            Some(vec![
                Step::Key("a".into()),
                Step::Key("b c".into()),
                Step::Index(-1)
            ])
        );
        let v = json!({"a": {"b c": [1, 2]}});
        assert_eq!(p.query.query(&v).all(), vec![&json!(2)]);
        let q = path("$.vals[3:]").unwrap();
        assert!(!q.is_reference());
        let h = path("$.input-foo-bar").unwrap();
        assert_eq!(
            h.query.query(&json!({"input-foo-bar": 1})).all(),
            vec![&json!(1)]
        );
        assert_eq!(path("$$.Execution.Id").unwrap().root, PathRoot::Context);
        assert_eq!(path("$").unwrap().steps, Some(vec![]));
        assert!(matches!(path("bug$.x"), Err(Refusal::Invalid(_))));
        // A variable: the path runs over the variables, the name its first step.
        let v = path("$foo.a[0]").unwrap();
        assert_eq!(
            (v.root, v.text.as_str()),
            (PathRoot::Variables, "$foo.a[0]")
        );
        assert_eq!(
            v.steps,
            Some(vec![
                Step::Key("foo".into()),
                Step::Key("a".into()),
                Step::Index(0)
            ])
        );
        assert!(matches!(path("$states.input"), Err(Refusal::Invalid(_))));
        assert!(matches!(
            path("$[(@.length-1)].bar"),
            Err(Refusal::Unsupported(_))
        ));
        assert!(matches!(path("$..[?"), Err(Refusal::Invalid(_))));
        assert!(path("$.store.book[?(@.price < 10)].title").is_ok());
    }

    #[test]
    fn intrinsic_calls_parse() {
        let c = call("States.Format('Welcome to {} {}\\'s playlist.', $.firstName, $.lastName)")
            .unwrap();
        assert_eq!(c.function, Intrinsic::Format);
        assert_eq!(c.args.len(), 3);
        assert!(call("States.Array('Foo', 2020, $.someJson, null)").is_ok());
        assert!(call("States.MathAdd(States.ArrayLength($.a), -1)").is_ok());
        assert!(call("States.UUID()").is_ok());
        assert!(call("States.ArrayGetItem($.a[0], $.i)").is_ok());
        for bad in [
            "States.Nope()",
            "States.UUID(1)",
            "States.Format(",
            "States.MathAdd(1, 2) x",
            "States.Format('a)",
        ] {
            assert!(matches!(call(bad), Err(Refusal::Invalid(_))), "{bad}");
        }
        assert!(matches!(value_expr("ipsum"), Err(Refusal::Invalid(_))));
    }
}
