//! Structured conditions over a document (a States-language `Choice` rule):
//! comparisons of the value at a path with a literal or with another path,
//! type tests, and `And`/`Or`/`Not`. Evaluated by `engine::choice`.

use super::document::DocPath;
use serde::Serialize;
use serde_json::Value;

/// What a comparison does with the two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    Equals,
    LessThan,
    GreaterThan,
    LessThanEquals,
    GreaterThanEquals,
}

/// The operand type a comparison requires (a value of another type never matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operand {
    String,
    Numeric,
    Boolean,
    /// RFC 3339 timestamps, compared as instants.
    Timestamp,
}

/// A type or presence test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeTest {
    Null,
    Present,
    Numeric,
    String,
    Boolean,
    Timestamp,
}

/// The right-hand side of a comparison.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Against {
    Literal(Value),
    Path(DocPath),
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Rule {
    And {
        all: Vec<Rule>,
    },
    Or {
        any: Vec<Rule>,
    },
    Not {
        rule: Box<Rule>,
    },
    Compare {
        variable: DocPath,
        operand: Operand,
        compare: Compare,
        against: Against,
    },
    /// `StringMatches`: `*` matches any run of characters, `\*` a literal star.
    Matches {
        variable: DocPath,
        pattern: String,
    },
    /// `IsNull`, `IsPresent`, ...: holds when the test's result equals `expect`.
    Is {
        variable: DocPath,
        test: TypeTest,
        expect: bool,
    },
}

impl Rule {
    /// The rule as a person reads it on a diagram (`$.x > 10`,
    /// `$.kind matches "a*"`, `not ($.ok is boolean)`, `... and ...`),
    /// at most `max` characters (cut with an ellipsis).
    pub fn label(&self, max: usize) -> String {
        cut(&self.text(), max)
    }

    fn text(&self) -> String {
        let join = |rules: &[Rule], word: &str| {
            rules
                .iter()
                .map(|r| match r {
                    Rule::And { .. } | Rule::Or { .. } => format!("({})", r.text()),
                    _ => r.text(),
                })
                .collect::<Vec<_>>()
                .join(&format!(" {word} "))
        };
        match self {
            Rule::And { all } => join(all, "and"),
            Rule::Or { any } => join(any, "or"),
            Rule::Not { rule } => format!("not ({})", rule.text()),
            Rule::Compare {
                variable,
                compare,
                against,
                ..
            } => {
                let op = match compare {
                    Compare::Equals => "==",
                    Compare::LessThan => "<",
                    Compare::GreaterThan => ">",
                    Compare::LessThanEquals => "<=",
                    Compare::GreaterThanEquals => ">=",
                };
                let rhs = match against {
                    Against::Literal(v) => v.to_string(),
                    Against::Path(p) => p.text.clone(),
                };
                format!("{} {op} {rhs}", variable.text)
            }
            Rule::Matches { variable, pattern } => {
                format!(
                    "{} matches {}",
                    variable.text,
                    Value::String(pattern.clone())
                )
            }
            Rule::Is {
                variable,
                test,
                expect,
            } => {
                let what = match test {
                    TypeTest::Null => "null",
                    TypeTest::Present => "present",
                    TypeTest::Numeric => "numeric",
                    TypeTest::String => "a string",
                    TypeTest::Boolean => "a boolean",
                    TypeTest::Timestamp => "a timestamp",
                };
                let not = if *expect { "" } else { "not " };
                format!("{} is {not}{what}", variable.text)
            }
        }
    }
}

/// `text` at most `max` characters, a longer one cut with an ellipsis.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let kept: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}
