//! The JSON layer of the States-language loader: strict JSON (no comments,
//! no trailing commas) parsed by `jsonc-parser` into a tree that keeps each
//! value's line:column, with hostile-input limits checked first (size,
//! nesting depth before the recursive parser runs, duplicate keys).

use crate::codes::Code;
use crate::diag::{Diagnostic, Pos};
use jsonc_parser::ast;
use serde_json::Value;

/// The largest document accepted.
pub const MAX_BYTES: usize = 1 << 20;
/// The deepest nesting of objects and arrays accepted.
pub const MAX_DEPTH: usize = 64;

/// A JSON value with its position.
#[derive(Debug, Clone)]
pub struct J {
    pub pos: Pos,
    pub v: Jv,
}

#[derive(Debug, Clone)]
pub enum Jv {
    Null,
    Bool(bool),
    /// The number as parsed by serde_json (integer or float).
    Num(Value),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(Key, J)>),
}

/// An object key with its position.
#[derive(Debug, Clone)]
pub struct Key {
    pub name: String,
    pub pos: Pos,
}

impl J {
    pub fn as_str(&self) -> Option<&str> {
        match &self.v {
            Jv::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_obj(&self) -> Option<&[(Key, J)]> {
        match &self.v {
            Jv::Obj(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_arr(&self) -> Option<&[J]> {
        match &self.v {
            Jv::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.v, Jv::Null)
    }

    /// The field `name` of an object.
    pub fn get(&self, name: &str) -> Option<&J> {
        self.as_obj()?
            .iter()
            .find(|(k, _)| k.name == name)
            .map(|(_, v)| v)
    }

    /// What kind of JSON value this is (for messages).
    pub fn kind(&self) -> &'static str {
        match &self.v {
            Jv::Null => "null",
            Jv::Bool(_) => "a boolean",
            Jv::Num(_) => "a number",
            Jv::Str(_) => "a string",
            Jv::Arr(_) => "an array",
            Jv::Obj(_) => "an object",
        }
    }

    /// The plain JSON value.
    pub fn to_value(&self) -> Value {
        match &self.v {
            Jv::Null => Value::Null,
            Jv::Bool(b) => Value::Bool(*b),
            Jv::Num(n) => n.clone(),
            Jv::Str(s) => Value::String(s.clone()),
            Jv::Arr(a) => Value::Array(a.iter().map(J::to_value).collect()),
            Jv::Obj(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (k.name.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

/// Byte offsets to 1-based line:column (columns count characters).
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { text, starts }
    }

    fn pos(&self, offset: usize) -> Pos {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts[line - 1];
        let column = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(0);
        Pos {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column + 1).unwrap_or(u32::MAX),
        }
    }
}

/// The nesting depth check, before any recursive parsing: the offset of the
/// first bracket deeper than [`MAX_DEPTH`].
fn too_deep(text: &str) -> Option<usize> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, b) in text.bytes().enumerate() {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Parse a document. `Err` holds the diagnostics that stop loading.
pub fn parse(text: &str) -> Result<J, Vec<Diagnostic>> {
    let lines = Lines::new(text);
    if text.len() > MAX_BYTES {
        return Err(vec![Diagnostic::error(
            Code::StatesLimitExceeded,
            format!(
                "the document is {} bytes; the limit is {MAX_BYTES}",
                text.len()
            ),
        )]);
    }
    if let Some(at) = too_deep(text) {
        return Err(vec![Diagnostic::error(
            Code::StatesLimitExceeded,
            format!("objects and arrays nest deeper than {MAX_DEPTH} levels"),
        )
        .at(lines.pos(at))]);
    }
    let options = jsonc_parser::ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    let parsed = jsonc_parser::parse_to_ast(text, &Default::default(), &options).map_err(|e| {
        vec![Diagnostic::error(
            Code::StatesJsonMalformed,
            format!("not well-formed JSON: {}", e.kind()),
        )
        .at(lines.pos(e.range().start))]
    })?;
    let Some(value) = parsed.value else {
        return Err(vec![Diagnostic::error(
            Code::StatesJsonMalformed,
            "the document is empty",
        )]);
    };
    let mut diags = Vec::new();
    let tree = convert(&value, &lines, &mut diags);
    if diags.is_empty() {
        Ok(tree)
    } else {
        Err(diags)
    }
}

fn convert(v: &ast::Value<'_>, lines: &Lines<'_>, diags: &mut Vec<Diagnostic>) -> J {
    use jsonc_parser::common::Ranged;
    let pos = lines.pos(v.start());
    let v = match v {
        ast::Value::NullKeyword(_) => Jv::Null,
        ast::Value::BooleanLit(b) => Jv::Bool(b.value),
        ast::Value::NumberLit(n) => match serde_json::from_str::<Value>(n.value) {
            Ok(v @ Value::Number(_)) => Jv::Num(v),
            _ => {
                diags.push(
                    Diagnostic::error(
                        Code::StatesJsonMalformed,
                        format!("`{}` is not a JSON number", n.value),
                    )
                    .at(pos),
                );
                Jv::Null
            }
        },
        ast::Value::StringLit(s) => Jv::Str(s.value.to_string()),
        ast::Value::Array(a) => Jv::Arr(
            a.elements
                .iter()
                .map(|e| convert(e, lines, diags))
                .collect(),
        ),
        ast::Value::Object(o) => {
            let mut props: Vec<(Key, J)> = Vec::with_capacity(o.properties.len());
            for p in &o.properties {
                let name = match &p.name {
                    ast::ObjectPropName::String(s) => s.value.to_string(),
                    ast::ObjectPropName::Word(w) => w.value.to_string(),
                };
                let kpos = lines.pos(p.range.start);
                if props.iter().any(|(k, _)| k.name == name) {
                    diags.push(
                        Diagnostic::error(
                            Code::StatesDuplicateKey,
                            format!("the key `{name}` appears twice in one object"),
                        )
                        .at(kpos)
                        .element(name.clone()),
                    );
                    continue;
                }
                let value = convert(&p.value, lines, diags);
                props.push((Key { name, pos: kpos }, value));
            }
            Jv::Obj(props)
        }
    };
    J { pos, v }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_line_and_column() {
        let j = parse("{\n  \"a\": [1, \"x\"],\n  \"b\": null\n}").unwrap();
        let a = j.get("a").unwrap();
        assert_eq!((a.pos.line, a.pos.column), (2, 8));
        let x = &a.as_arr().unwrap()[1];
        assert_eq!((x.pos.line, x.pos.column), (2, 12));
        assert_eq!(j.to_value(), serde_json::json!({"a": [1, "x"], "b": null}));
    }

    #[test]
    fn hostile_input_is_refused_with_codes() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse(&deep).unwrap_err()[0].code, Code::StatesLimitExceeded);
        let dup = parse("{\"a\": 1, \"a\": 2}").unwrap_err();
        assert_eq!(dup[0].code, Code::StatesDuplicateKey);
        assert_eq!((dup[0].line, dup[0].column), (1, 10));
        for bad in [
            "{\"a\": 1,}",
            "{// c\n}",
            "{a: 1}",
            "{\"a\": 'x'}",
            "{\"a\": 01}",
            "",
        ] {
            let d = parse(bad).unwrap_err();
            assert_eq!(d[0].code, Code::StatesJsonMalformed, "{bad}");
        }
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_BYTES));
        assert_eq!(parse(&big).unwrap_err()[0].code, Code::StatesLimitExceeded);
    }
}
