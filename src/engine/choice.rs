//! Evaluating structured rules (`model::Rule`) over a document.
//!
//! A comparison whose variable is missing, or of another type than the
//! operator requires, is false (never an error); a `...Path` operand that
//! does not resolve is `States.Runtime`.

use super::document::{read, DocError, DocResult};
use crate::codes::Code;
use crate::model::{Against, Compare, DocPath, Operand, Rule, TypeTest};
use serde_json::Value;
use std::cmp::Ordering;

/// The value at `path`, or `None` when it names nothing.
fn lookup(path: &DocPath, doc: &Value, context: &Value) -> Option<Value> {
    read(path, doc, context).ok()
}

pub fn eval(rule: &Rule, doc: &Value, context: &Value) -> DocResult<bool> {
    Ok(match rule {
        Rule::And { all } => {
            for r in all {
                if !eval(r, doc, context)? {
                    return Ok(false);
                }
            }
            true
        }
        Rule::Or { any } => {
            for r in any {
                if eval(r, doc, context)? {
                    return Ok(true);
                }
            }
            false
        }
        Rule::Not { rule } => !eval(rule, doc, context)?,
        Rule::Is {
            variable,
            test,
            expect,
        } => {
            let v = lookup(variable, doc, context);
            let holds = match (test, &v) {
                (TypeTest::Present, v) => v.is_some(),
                (_, None) => false,
                (TypeTest::Null, Some(v)) => v.is_null(),
                (TypeTest::Numeric, Some(v)) => v.is_number(),
                (TypeTest::String, Some(v)) => v.is_string(),
                (TypeTest::Boolean, Some(v)) => v.is_boolean(),
                (TypeTest::Timestamp, Some(v)) => v.as_str().and_then(timestamp).is_some(),
            };
            holds == *expect
        }
        Rule::Matches { variable, pattern } => match lookup(variable, doc, context) {
            Some(Value::String(s)) => glob(pattern, &s),
            _ => false,
        },
        Rule::Compare {
            variable,
            operand,
            compare,
            against,
        } => {
            let right = match against {
                Against::Literal(v) => v.clone(),
                Against::Path(p) => read(p, doc, context).map_err(|e| {
                    DocError::new(Code::StatesRuntime, format!("choice rule: {}", e.message))
                })?,
            };
            let Some(left) = lookup(variable, doc, context) else {
                return Ok(false);
            };
            match order(*operand, &left, &right) {
                None => false,
                Some(o) => match compare {
                    Compare::Equals => o == Ordering::Equal,
                    Compare::LessThan => o == Ordering::Less,
                    Compare::GreaterThan => o == Ordering::Greater,
                    Compare::LessThanEquals => o != Ordering::Greater,
                    Compare::GreaterThanEquals => o != Ordering::Less,
                },
            }
        }
    })
}

/// Compare two values as `operand`; `None` when either is not of that type.
fn order(operand: Operand, l: &Value, r: &Value) -> Option<Ordering> {
    match operand {
        Operand::String => Some(l.as_str()?.cmp(r.as_str()?)),
        Operand::Numeric => l.as_f64()?.partial_cmp(&r.as_f64()?),
        Operand::Boolean => Some(l.as_bool()?.cmp(&r.as_bool()?)),
        Operand::Timestamp => Some(timestamp(l.as_str()?)?.cmp(&timestamp(r.as_str()?)?)),
    }
}

/// An RFC 3339 date-time with a `T` between date and time, as Step
/// Functions reads one (`2016-12-05 21:29:29Z`, which RFC 3339 allows, is
/// no timestamp there).
pub fn timestamp(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if !matches!(s.as_bytes().get(10), Some(b'T' | b't')) {
        return None;
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// `*` matches any run of characters; `\*` and `\\` are literal.
fn glob(pattern: &str, s: &str) -> bool {
    // Tokens: Some(c) a literal char, None a star.
    let mut toks: Vec<Option<char>> = Vec::new();
    let mut it = pattern.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => toks.push(Some(it.next().unwrap_or('\\'))),
            '*' => toks.push(None),
            c => toks.push(Some(c)),
        }
    }
    let s: Vec<char> = s.chars().collect();
    // Iterative wildcard matching with backtracking to the last star.
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match toks.get(p) {
            Some(Some(c)) if *c == s[i] => {
                p += 1;
                i += 1;
            }
            Some(None) => {
                star = Some((p, i));
                p += 1;
            }
            _ => match star {
                Some((sp, si)) => {
                    p = sp + 1;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    toks[p..].iter().all(Option::is_none)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_stars_and_escapes() {
        assert!(glob("log-*.txt", "log-2024.txt"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYc"));
        assert!(!glob("a*b", "ac"));
        assert!(glob("a\\*b", "a*b"));
        assert!(!glob("a\\*b", "axb"));
    }

    #[test]
    fn timestamps_order_as_instants() {
        assert_eq!(
            order(
                Operand::Timestamp,
                &Value::from("2026-01-01T01:00:00+01:00"),
                &Value::from("2026-01-01T00:00:00Z")
            ),
            Some(Ordering::Equal)
        );
        assert_eq!(
            order(Operand::Numeric, &Value::from("1"), &Value::from(1)),
            None
        );
    }
}
