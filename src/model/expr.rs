//! Conditions: CEL expressions over process variables, parsed at load time.
//!
//! CEL is sandboxed and not Turing-complete: no loops, no I/O, every
//! evaluation terminates. Each top-level variable is bound by name.
use crate::codes::Code;
use serde::Serialize;
use std::sync::Arc;

/// The longest condition text accepted (the parser recurses on nesting).
pub const MAX_EXPR_LEN: usize = 4096;

#[derive(Clone)]
pub struct Expr {
    source: String,
    kind: ExprKind,
    /// The variables it names (an evaluation binds only these).
    names: Arc<[String]>,
}

#[derive(Clone)]
enum ExprKind {
    /// The program the interpreter runs, and its syntax tree (for the cost
    /// bound, `expr_cost`, taken before every evaluation).
    Cel(Arc<cel_interpreter::Program>, Arc<cel_parser::Expression>),
    /// A structured rule over a document (`engine::choice` evaluates it).
    Rule(Arc<super::rule::Rule>),
    /// A JSONata condition (`engine::jsonata` evaluates it).
    Jsonata(Arc<super::Jsonata>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    pub message: String,
    /// The evaluation was refused because its cost bound is over the budget.
    pub over_budget: bool,
    /// The condition parses but can never be evaluated (a constant part of
    /// it fails, or it is constant and not a boolean): refused at load with
    /// `SUTRA.CONFIG.CONDITION.INVALID` rather than `CONDITION.SYNTAX`.
    pub invalid: bool,
}

impl ExprError {
    fn new(message: impl Into<String>) -> ExprError {
        let message: String = message.into();
        ExprError {
            message,
            over_budget: false,
            invalid: false,
        }
    }

    fn invalid(message: impl Into<String>) -> ExprError {
        ExprError {
            invalid: true,
            ..ExprError::new(message)
        }
    }

    /// The code a loader refuses this condition with.
    pub fn load_code(&self) -> Code {
        if self.invalid {
            Code::ConditionInvalid
        } else {
            Code::ConditionSyntax
        }
    }

    /// The code an instance fails with when this condition fails.
    pub fn code(&self) -> Code {
        if self.over_budget {
            Code::ConditionBudgetExceeded
        } else {
            Code::ConditionFailed
        }
    }
}

impl Expr {
    /// Parse a condition. A leading `=` (Zeebe's FEEL marker) and a `${...}`
    /// wrapper (Camunda's JUEL marker) are accepted and stripped.
    pub fn parse(source: &str) -> Result<Expr, ExprError> {
        let mut text = source.trim();
        if let Some(rest) = text.strip_prefix('=') {
            text = rest.trim();
        }
        if let Some(inner) = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) {
            text = inner.trim();
        }
        if text.is_empty() {
            return Err(ExprError::new("empty expression"));
        }
        if text.len() > MAX_EXPR_LEN {
            return Err(ExprError::new(format!(
                "expression longer than {MAX_EXPR_LEN} bytes"
            )));
        }
        if nesting_depth(text) > 64 {
            return Err(ExprError::new("expression nested deeper than 64 levels"));
        }
        let program = compile_guarded(text)?;
        let tree = match quietly(|| cel_parser::Parser::default().parse(text)) {
            Some(Ok(tree)) => tree,
            _ => return Err(ExprError::new("syntax error")),
        };
        if let Some(why) = super::expr_static::constant_failure(&tree) {
            return Err(ExprError::invalid(format!(
                "a part of it that names no variable can never be evaluated: {why}"
            )));
        }
        let mut names: Vec<String> = program
            .references()
            .variables()
            .into_iter()
            .map(str::to_string)
            .collect();
        names.sort();
        names.dedup();
        Ok(Expr {
            source: source.to_string(),
            kind: ExprKind::Cel(Arc::new(program), Arc::new(tree)),
            names: names.into(),
        })
    }

    /// Parse a condition a flow is taken on: as [`Expr::parse`], and a
    /// condition that names no variable must be a boolean (`1 + 1` would fail
    /// every evaluation).
    pub fn parse_condition(source: &str) -> Result<Expr, ExprError> {
        let e = Expr::parse(source)?;
        if let ExprKind::Cel(_, tree) = &e.kind {
            match super::expr_static::constant_value(tree) {
                Some(Ok(serde_json::Value::Bool(_))) | None => {}
                Some(Ok(other)) => {
                    return Err(ExprError::invalid(format!(
                        "it names no variable and always yields {other}, not a boolean"
                    )))
                }
                Some(Err(why)) => {
                    return Err(ExprError::invalid(format!(
                        "it can never be evaluated: {why}"
                    )))
                }
            }
        }
        Ok(e)
    }

    /// Whether this condition and `other` can never both hold (syntactically:
    /// a negation, the opposite comparison, two different literals; see
    /// `expr_static::excludes`). `false` for structured rules.
    pub fn excludes(&self, other: &Expr) -> bool {
        match (&self.kind, &other.kind) {
            (ExprKind::Cel(_, a), ExprKind::Cel(_, b)) => super::expr_static::excludes(a, b),
            _ => false,
        }
    }

    /// A condition that is a structured rule (its `source` is the rule as JSON).
    pub fn rule(rule: super::rule::Rule) -> Expr {
        Expr {
            source: serde_json::to_string(&rule).unwrap_or_default(),
            kind: ExprKind::Rule(Arc::new(rule)),
            names: Arc::from(Vec::new()),
        }
    }

    /// The structured rule, when this condition is one.
    pub fn as_rule(&self) -> Option<&super::rule::Rule> {
        match &self.kind {
            ExprKind::Rule(r) => Some(r),
            _ => None,
        }
    }

    /// A JSONata condition (a Choice rule's `Condition`).
    pub fn jsonata(j: super::Jsonata) -> Expr {
        Expr {
            source: j.source().to_string(),
            names: Arc::from(Vec::new()),
            kind: ExprKind::Jsonata(Arc::new(j)),
        }
    }

    /// The JSONata expression, when this condition is one.
    pub fn as_jsonata(&self) -> Option<&super::Jsonata> {
        match &self.kind {
            ExprKind::Jsonata(j) => Some(j),
            _ => None,
        }
    }

    /// The cost bound of evaluating this condition over `vars` (see
    /// `expr_cost`); `None` for a structured rule.
    pub fn cost_bound(&self, vars: &serde_json::Map<String, serde_json::Value>) -> Option<u64> {
        match &self.kind {
            ExprKind::Cel(_, tree) => Some(super::expr_cost::bound(tree, vars)),
            ExprKind::Rule(_) | ExprKind::Jsonata(_) => None,
        }
    }

    /// Whether evaluating this condition may loop over data (a comprehension
    /// or a regular expression; see `expr_cost::may_iterate`).
    pub fn may_iterate(&self) -> bool {
        match &self.kind {
            ExprKind::Cel(_, tree) => super::expr_cost::may_iterate(tree),
            ExprKind::Rule(_) => false,
            ExprKind::Jsonata(_) => true,
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The variables the expression names (comprehension variables
    /// included); an evaluation reads no other.
    pub fn variables(&self) -> &[String] {
        &self.names
    }

    /// The condition as a diagram labels its flow: a CEL expression as
    /// written, a structured rule in words (`Rule::label`), at most `max`
    /// characters.
    pub fn label(&self, max: usize) -> String {
        match &self.kind {
            ExprKind::Rule(r) => r.label(max),
            // A CEL expression or a JSONata condition, as written.
            ExprKind::Cel(..) | ExprKind::Jsonata(_) => super::rule::cut(self.source.trim(), max),
        }
    }

    /// Evaluate over a JSON object of variables.
    pub fn eval(
        &self,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value, ExprError> {
        let (program, tree) = match &self.kind {
            ExprKind::Cel(p, t) => (p, t),
            ExprKind::Rule(_) | ExprKind::Jsonata(_) => {
                return Err(ExprError::new(
                    "a structured rule is evaluated over a document, not over variables",
                ))
            }
        };
        let cost = super::expr_cost::bound(tree, vars);
        if cost > super::expr_cost::BUDGET {
            return Err(ExprError {
                message: format!(
                    "evaluating `{}` over these variables could cost {cost} units, over the budget of {} \
                     (a comprehension over a large list, or comprehensions nested)",
                    self.source,
                    super::expr_cost::BUDGET
                ),
                over_budget: true,
                invalid: false,
            });
        }
        let mut ctx = cel_interpreter::Context::default();
        // Only the variables it names: an instance's other variables (a
        // large collection) cost nothing to an evaluation that reads none.
        for k in self.names.iter() {
            if let Some(v) = vars.get(k) {
                ctx.add_variable(k.as_str(), v)
                    .map_err(|e| ExprError::new(e.to_string()))?;
            }
        }
        let program = std::panic::AssertUnwindSafe(program);
        let ctx = std::panic::AssertUnwindSafe(&ctx);
        let value = quietly(|| program.execute(&ctx))
            .ok_or_else(|| {
                ExprError::new(format!(
                    "evaluating `{}` failed inside the CEL interpreter",
                    self.source
                ))
            })?
            .map_err(|e| ExprError::new(e.to_string()))?;
        value.json().map_err(|e| ExprError::new(e.to_string()))
    }

    /// Evaluate a condition: it must yield a boolean.
    pub fn eval_bool(
        &self,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, ExprError> {
        match self.eval(vars)? {
            serde_json::Value::Bool(b) => Ok(b),
            other => Err(ExprError::new(format!(
                "condition `{}` yielded {other}, not a boolean",
                self.source
            ))),
        }
    }
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `cel-interpreter` 0.10's ANTLR visitor panics on some syntax errors (e.g.
/// `amount >`). A definition is untrusted input, so the compile runs under
/// `catch_unwind` and a panic becomes an ordinary [`ExprError`]; a chained
/// panic hook keeps that one panic off stderr (only on this thread, only for
/// the guarded call; every other panic is reported as before).
fn compile_guarded(text: &str) -> Result<cel_interpreter::Program, ExprError> {
    match quietly(|| cel_interpreter::Program::compile(text)) {
        Some(Ok(program)) => Ok(program),
        Some(Err(e)) => Err(ExprError::new(e.to_string())),
        None => Err(ExprError::new(
            "syntax error (the expression is incomplete or malformed)",
        )),
    }
}

/// Run `f`, turning a panic into `None` without printing it.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Option<T> {
    quietly_why(f).ok()
}

/// [`quietly`], with the panic's message.
pub(crate) fn quietly_why<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(f);
    QUIET.with(|q| q.set(false));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

fn nesting_depth(s: &str) -> usize {
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

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn evaluates_over_variables() {
        let e = Expr::parse("amount > 100 && customer.tier == 'gold'").unwrap();
        assert!(e
            .eval_bool(&vars(json!({"amount": 150, "customer": {"tier": "gold"}})))
            .unwrap());
        assert!(!e
            .eval_bool(&vars(json!({"amount": 50, "customer": {"tier": "gold"}})))
            .unwrap());
    }

    #[test]
    fn strips_feel_and_juel_markers() {
        assert!(Expr::parse("= x == 1")
            .unwrap()
            .eval_bool(&vars(json!({"x": 1})))
            .unwrap());
        assert!(Expr::parse("${x == 1}")
            .unwrap()
            .eval_bool(&vars(json!({"x": 1})))
            .unwrap());
    }

    #[test]
    fn syntax_errors_are_refused_at_parse() {
        for bad in ["amount >", "order.id ==", "x == 1 &&", "a +"] {
            assert!(Expr::parse(bad).is_err(), "{bad}");
        }
        assert!(Expr::parse("").is_err());
        assert!(Expr::parse(&"(".repeat(100)).is_err());
    }

    #[test]
    fn a_missing_variable_or_non_boolean_is_an_error_not_a_panic() {
        let e = Expr::parse("missing > 1").unwrap();
        assert!(e.eval_bool(&vars(json!({}))).is_err());
        let e = Expr::parse("1 + 1").unwrap();
        assert!(e.eval_bool(&vars(json!({}))).is_err());
    }

    #[test]
    fn a_constant_part_that_cannot_evaluate_is_refused_at_parse() {
        for bad in [
            "1 + \"a\" == 2",
            "x > 1 && 1 + \"a\" == 2",
            "x == 1 / 0",
            "x == {\"a\": 1}.b",
            "nope(1) == x",
            "x || [1, 2] + 1 == 1",
        ] {
            let err = Expr::parse(bad).unwrap_err();
            assert!(err.invalid, "{bad}: {err}");
            assert_eq!(err.load_code(), Code::ConditionInvalid, "{bad}");
        }
        // A syntax error keeps its own code.
        assert_eq!(
            Expr::parse("a +").unwrap_err().load_code(),
            Code::ConditionSyntax
        );
        // Constant parts that evaluate, and a failing part never evaluated, load.
        for good in [
            "x > 1 + 2",
            "x == \"a\" + \"b\"",
            "size([1, 2]) == x",
            "false && 1 + \"a\" == 2",
            "l.all(i, i > 0)",
            "has(a.b) && a.b == 1",
            "true",
        ] {
            Expr::parse_condition(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn a_constant_condition_must_be_a_boolean() {
        let err = Expr::parse_condition("1 + 1").unwrap_err();
        assert_eq!(err.load_code(), Code::ConditionInvalid);
        assert!(
            Expr::parse("1 + 1").is_ok(),
            "a correlation key may be any value"
        );
    }

    #[test]
    fn exclusive_guards_are_recognised() {
        let ex = |a: &str, b: &str| Expr::parse(a).unwrap().excludes(&Expr::parse(b).unwrap());
        for (a, b) in [
            ("amount > 100", "!(amount > 100)"),
            ("!ok", "ok"),
            ("amount > 100", "amount <= 100"),
            ("a.b == 'x'", "a.b != 'x'"),
            ("kind == 'a'", "kind == 'b'"),
            ("1 == n", "n == 2"),
            // A negation across map and list literals (found by dialect::props).
            (
                "x < 1 && {\"k\": 1}.k < 0",
                "!((x < 1 && {\"k\": 1}.k < 0))",
            ),
            ("[x, 1] == l", "!([x, 1] == l)"),
            ("l.all(e, e > x)", "!l.all(e, e > x)"),
        ] {
            assert!(ex(a, b), "{a} / {b}");
            assert!(ex(b, a), "{b} / {a}");
        }
        for (a, b) in [
            ("amount > 100", "amount > 50"),
            ("amount > 100", "other <= 100"),
            ("kind == 'a'", "kind == 'a'"),
            ("n == 1", "n == 1.0"),
            ("a || b", "!a"),
            ("{\"k\": x}.k > 1", "!({\"k\": y}.k > 1)"),
            (
                "{\"a\": 1, \"b\": x}.a > 1",
                "!({\"b\": x, \"a\": 1}.a > 1)",
            ),
            ("l.all(e, e > x)", "!l.exists(e, e > x)"),
        ] {
            assert!(!ex(a, b), "{a} / {b}");
        }
    }
}
