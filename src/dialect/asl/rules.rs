//! Choice rules: `Variable` + one comparison operator, or `And`/`Or`/`Not`,
//! into `model::Rule`.

use super::json::J;
use super::Ctx;
use crate::codes::Code;
use crate::model::{Against, Compare, Operand, Rule, TypeTest};

/// The comparison operators: (field, operand type, comparison, takes a path).
const COMPARISONS: &[(&str, Operand, Compare)] = &[
    ("StringEquals", Operand::String, Compare::Equals),
    ("StringLessThan", Operand::String, Compare::LessThan),
    ("StringGreaterThan", Operand::String, Compare::GreaterThan),
    (
        "StringLessThanEquals",
        Operand::String,
        Compare::LessThanEquals,
    ),
    (
        "StringGreaterThanEquals",
        Operand::String,
        Compare::GreaterThanEquals,
    ),
    ("NumericEquals", Operand::Numeric, Compare::Equals),
    ("NumericLessThan", Operand::Numeric, Compare::LessThan),
    ("NumericGreaterThan", Operand::Numeric, Compare::GreaterThan),
    (
        "NumericLessThanEquals",
        Operand::Numeric,
        Compare::LessThanEquals,
    ),
    (
        "NumericGreaterThanEquals",
        Operand::Numeric,
        Compare::GreaterThanEquals,
    ),
    ("BooleanEquals", Operand::Boolean, Compare::Equals),
    ("TimestampEquals", Operand::Timestamp, Compare::Equals),
    ("TimestampLessThan", Operand::Timestamp, Compare::LessThan),
    (
        "TimestampGreaterThan",
        Operand::Timestamp,
        Compare::GreaterThan,
    ),
    (
        "TimestampLessThanEquals",
        Operand::Timestamp,
        Compare::LessThanEquals,
    ),
    (
        "TimestampGreaterThanEquals",
        Operand::Timestamp,
        Compare::GreaterThanEquals,
    ),
];

const TESTS: &[(&str, TypeTest)] = &[
    ("IsNull", TypeTest::Null),
    ("IsPresent", TypeTest::Present),
    ("IsNumeric", TypeTest::Numeric),
    ("IsString", TypeTest::String),
    ("IsBoolean", TypeTest::Boolean),
    ("IsTimestamp", TypeTest::Timestamp),
];

/// Parse one rule. `top` rules carry `Next` (read by the caller); nested ones must not.
pub fn rule(cx: &mut Ctx, j: &J, state: &str, top: bool, depth: usize) -> Option<Rule> {
    let Some(obj) = j.as_obj() else {
        cx.err(
            Code::StatesInvalidField,
            j.pos,
            state,
            format!("a choice rule must be an object, not {}", j.kind()),
        );
        return None;
    };
    if depth > 32 {
        cx.err(
            Code::StatesLimitExceeded,
            j.pos,
            state,
            "choice rules nest deeper than 32 levels",
        );
        return None;
    }
    let mut operator: Option<(&str, &J)> = None;
    let mut variable = None;
    for (k, v) in obj {
        match k.name.as_str() {
            "Comment" => {}
            "Next" if top => {}
            "Next" => cx.err(
                Code::StatesUnknownField,
                k.pos,
                state,
                "a nested choice rule has no `Next`",
            ),
            "End" => cx.err(
                Code::StatesUnknownField,
                k.pos,
                state,
                "a choice rule cannot end the machine (`End`): it names a `Next` state",
            ),
            "Variable" => variable = Some(v),
            "Condition" => cx.err(
                Code::StatesInvalidField,
                k.pos,
                state,
                "`Condition` is a JSONata field: this Choice's `QueryLanguage` is JSONPath",
            ),
            "Assign" => cx.unsupported(
                k.pos,
                state,
                "`Assign` on a choice rule (set it on the Choice state)",
            ),
            name if is_operator(name) => {
                if let Some((first, _)) = operator {
                    cx.err(
                        Code::StatesConflictingFields,
                        k.pos,
                        state,
                        format!("a choice rule has one operator: `{first}` and `{name}`"),
                    );
                } else {
                    operator = Some((name, v));
                }
            }
            other => cx.err(
                Code::StatesUnknownField,
                k.pos,
                state,
                format!("a choice rule has no field `{other}`"),
            ),
        }
    }
    if top && j.get("Next").is_none() {
        cx.err(
            Code::StatesMissingField,
            j.pos,
            state,
            "a choice rule needs `Next`",
        );
    }
    if let Some(n) = j.get("Next") {
        if n.as_str().is_none() {
            cx.err(
                Code::StatesInvalidField,
                n.pos,
                state,
                "`Next` must be a state name",
            );
        }
    }
    let Some((op, value)) = operator else {
        if j.get("Condition").is_none() {
            cx.err(
                Code::StatesMissingField,
                j.pos,
                state,
                "a choice rule needs a comparison operator, `And`, `Or` or `Not`",
            );
        }
        return None;
    };
    match op {
        "And" | "Or" => {
            if variable.is_some() {
                cx.err(
                    Code::StatesUnknownField,
                    j.pos,
                    state,
                    format!("`{op}` takes no `Variable`"),
                );
            }
            let Some(items) = value.as_arr().filter(|a| !a.is_empty()) else {
                cx.err(
                    Code::StatesInvalidField,
                    value.pos,
                    state,
                    format!("`{op}` must be a non-empty array of rules"),
                );
                return None;
            };
            let rules: Vec<Rule> = items
                .iter()
                .filter_map(|r| rule(cx, r, state, false, depth + 1))
                .collect();
            if rules.len() != items.len() {
                return None;
            }
            Some(if op == "And" {
                Rule::And { all: rules }
            } else {
                Rule::Or { any: rules }
            })
        }
        "Not" => {
            if variable.is_some() {
                cx.err(
                    Code::StatesUnknownField,
                    j.pos,
                    state,
                    "`Not` takes no `Variable`",
                );
            }
            let inner = rule(cx, value, state, false, depth + 1)?;
            Some(Rule::Not {
                rule: Box::new(inner),
            })
        }
        _ => {
            let Some(var) = variable else {
                cx.err(
                    Code::StatesMissingField,
                    j.pos,
                    state,
                    format!("`{op}` needs a `Variable`"),
                );
                return None;
            };
            let variable = cx.path_field(var, state, "Variable")?;
            comparison(cx, op, value, variable, state)
        }
    }
}

fn is_operator(name: &str) -> bool {
    matches!(name, "And" | "Or" | "Not" | "StringMatches")
        || TESTS.iter().any(|(n, _)| *n == name)
        || COMPARISONS
            .iter()
            .any(|(n, _, _)| *n == name || name.strip_suffix("Path") == Some(n))
}

fn comparison(
    cx: &mut Ctx,
    op: &str,
    value: &J,
    variable: crate::model::DocPath,
    state: &str,
) -> Option<Rule> {
    if op == "StringMatches" {
        let Some(p) = value.as_str() else {
            cx.err(
                Code::StatesInvalidField,
                value.pos,
                state,
                "`StringMatches` takes a string pattern",
            );
            return None;
        };
        return Some(Rule::Matches {
            variable,
            pattern: p.to_string(),
        });
    }
    if let Some((_, test)) = TESTS.iter().find(|(n, _)| *n == op) {
        let Some(expect) = (match &value.v {
            super::json::Jv::Bool(b) => Some(*b),
            _ => None,
        }) else {
            cx.err(
                Code::StatesInvalidField,
                value.pos,
                state,
                format!("`{op}` takes true or false"),
            );
            return None;
        };
        return Some(Rule::Is {
            variable,
            test: *test,
            expect,
        });
    }
    let (base, by_path) = match op.strip_suffix("Path") {
        Some(b) => (b, true),
        None => (op, false),
    };
    let &(_, operand, compare) = COMPARISONS.iter().find(|(n, _, _)| *n == base)?;
    let against = if by_path {
        Against::Path(cx.path_field(value, state, op)?)
    } else {
        let v = value.to_value();
        let ok = match operand {
            Operand::String => v.is_string(),
            Operand::Numeric => v.is_number(),
            Operand::Boolean => v.is_boolean(),
            Operand::Timestamp => v
                .as_str()
                .is_some_and(|s| chrono::DateTime::parse_from_rfc3339(s).is_ok()),
        };
        if !ok {
            let want = match operand {
                Operand::String => "a string",
                Operand::Numeric => "a number",
                Operand::Boolean => "a boolean",
                Operand::Timestamp => "an RFC 3339 timestamp",
            };
            cx.err(
                Code::StatesInvalidField,
                value.pos,
                state,
                format!("`{op}` takes {want}, not {}", value.kind()),
            );
            return None;
        }
        Against::Literal(v)
    };
    Some(Rule::Compare {
        variable,
        operand,
        compare,
        against,
    })
}
