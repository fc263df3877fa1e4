//! JSONata expressions (the States language's `{% ... %}`), parsed at load.
//!
//! The IR keeps the expression's text, parsed once by the loader (a syntax
//! error never reaches the engine); `engine::jsonata` evaluates it under the
//! step's budget. The implementation is Stedi's jsonata-rs, vendored
//! (`vendor/jsonata-rs/SUTRA-PATCH.md`).

use serde::Serialize;

/// The longest expression text accepted (the parser recurses on nesting).
pub const MAX_LEN: usize = 16 * 1024;

/// The deepest bracket nesting accepted in an expression's text.
const MAX_NESTING: usize = 64;

/// Functions of JSONata 2 that jsonata-rs does not implement: refused at
/// load (`SUTRA.CONFIG.STATES.UNSUPPORTED`, naming the function) rather than
/// failing at run time.
pub const UNSUPPORTED_FUNCTIONS: &[&str] = &[
    "average",
    "decodeUrl",
    "decodeUrlComponent",
    "encodeUrl",
    "encodeUrlComponent",
    "eval",
    "formatBase",
    "formatInteger",
    "formatNumber",
    "parseInteger",
    "shuffle",
    "sift",
    "spread",
    "type",
];

/// A parsed JSONata expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Jsonata {
    source: String,
}

/// Why an expression was refused at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonataRefusal {
    /// It does not parse.
    Syntax(String),
    /// It calls a function Sutra does not provide (named).
    Unsupported(String),
}

impl Jsonata {
    /// Parse an expression (the text inside `{% ... %}`).
    pub fn parse(text: &str) -> Result<Jsonata, JsonataRefusal> {
        if text.len() > MAX_LEN {
            return Err(JsonataRefusal::Syntax(format!(
                "the expression is longer than {MAX_LEN} bytes"
            )));
        }
        if nesting(text) > MAX_NESTING {
            return Err(JsonataRefusal::Syntax(format!(
                "the expression nests brackets deeper than {MAX_NESTING}"
            )));
        }
        let parsed = super::expr::quietly(|| {
            let arena = bumpalo::Bump::new();
            jsonata_rs::JsonAta::new(text, &arena)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        match parsed {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(JsonataRefusal::Syntax(e)),
            None => {
                return Err(JsonataRefusal::Syntax(
                    "the expression is malformed".to_string(),
                ))
            }
        }
        if let Some(f) = unsupported_call(text) {
            return Err(JsonataRefusal::Unsupported(format!(
                "the JSONata function `${f}`"
            )));
        }
        Ok(Jsonata {
            source: text.to_string(),
        })
    }

    /// The expression as written (without `{%` and `%}`).
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The first call of an unsupported function (`$name(`) outside string
/// literals, unless the expression binds that name itself (`$name :=`).
fn unsupported_call(text: &str) -> Option<&'static str> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut calls = Vec::new();
    let mut bound = Vec::new();
    while i < chars.len() {
        match chars[i] {
            q @ ('"' | '\'' | '`') => {
                i += 1;
                while i < chars.len() && chars[i] != q {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '$' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                match (chars.get(j), chars.get(j + 1)) {
                    (Some('('), _) => calls.push(name),
                    (Some(':'), Some('=')) => bound.push(name),
                    _ => {}
                }
            }
            _ => i += 1,
        }
    }
    calls
        .iter()
        .filter(|c| !bound.contains(c))
        .find_map(|c| UNSUPPORTED_FUNCTIONS.iter().find(|f| **f == c.as_str()))
        .copied()
}

fn nesting(s: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in s.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_parse_or_are_refused_with_a_reason() {
        assert!(Jsonata::parse("$states.input.a + 1").is_ok());
        assert!(Jsonata::parse("$sum($states.input.n)").is_ok());
        assert!(matches!(
            Jsonata::parse("1 +"),
            Err(JsonataRefusal::Syntax(_))
        ));
        assert_eq!(
            Jsonata::parse("$average([1, 2])"),
            Err(JsonataRefusal::Unsupported(
                "the JSONata function `$average`".into()
            ))
        );
        // Inside a string, or bound by the expression itself, the name is no call.
        assert!(Jsonata::parse("'$average(1)'").is_ok());
        assert!(Jsonata::parse("($type := function($x){1}; $type(2))").is_ok());
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(matches!(
            Jsonata::parse(&deep),
            Err(JsonataRefusal::Syntax(_))
        ));
    }
}
