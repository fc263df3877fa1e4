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
