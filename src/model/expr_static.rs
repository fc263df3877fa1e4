//! What can be known about a CEL condition before any variable exists.
//!
//! - **Constant parts** ([`constant_failure`]): a sub-expression that names no
//!   variable (no identifier, no comprehension) has one value whatever the
//!   instance holds. It is evaluated once at load with the same interpreter
//!   the engine uses; if that fails (`1 + "a"`, `1 / 0`, `{"a": 1}.b`, an
//!   unknown function), every evaluation that reaches it fails too, so the
//!   condition is refused at load (`SUTRA.CONFIG.CONDITION.INVALID`). The
//!   walk stops at the largest constant sub-trees (a constant whose value is
//!   fine, like `false && (1 + "a" == 2)`, is not looked into: its failing
//!   part is never evaluated) and is linear in the expression's length.
//! - **Exclusion** ([`excludes`]): two guards that can never both hold —
//!   one the negation of the other (`a` / `!a`, `!(a)`), the same comparison
//!   with the opposite operator (`x > 1` / `x <= 1`, `==` / `!=`), or one
//!   operand equal to two different literals (`x == 1` / `x == 2`). The HX
//!   loader uses it to refuse a `join="all"` fed by both arms of an if/else.
//!   Syntactic only: it never claims exclusion it cannot see, and misses
//!   exclusions it would need types or arithmetic to prove.

use cel_parser::ast::{operators, EntryExpr, Expr as Ast, IdedExpr};
use cel_parser::reference::Val;

/// The first constant sub-expression whose evaluation fails, with the
/// interpreter's message; `None` when every constant part evaluates.
pub(super) fn constant_failure(tree: &IdedExpr) -> Option<String> {
    let mut work = vec![tree];
    while let Some(e) = work.pop() {
        if is_constant(e) {
            if let Err(message) = evaluate(e) {
                return Some(message);
            }
            continue;
        }
        work.extend(children(e));
    }
    None
}

/// The value of the whole expression when it names no variable.
pub(super) fn constant_value(tree: &IdedExpr) -> Option<Result<serde_json::Value, String>> {
    if !is_constant(tree) {
        return None;
    }
    Some(evaluate(tree).and_then(|v| v.json().map_err(|e| e.to_string())))
}

fn evaluate(e: &IdedExpr) -> Result<cel_interpreter::Value, String> {
    let ctx = cel_interpreter::Context::default();
    let ctx = std::panic::AssertUnwindSafe(&ctx);
    let e = std::panic::AssertUnwindSafe(e);
    match super::expr::quietly(move || ctx.resolve(&e)) {
        Some(Ok(v)) => Ok(v),
        Some(Err(err)) => Err(err.to_string()),
        None => Err("the CEL interpreter failed on it".to_string()),
    }
}

/// Names no variable: no identifier and no comprehension anywhere below.
fn is_constant(tree: &IdedExpr) -> bool {
    let mut work = vec![tree];
    while let Some(e) = work.pop() {
        match &e.expr {
            Ast::Ident(_) | Ast::Comprehension(_) | Ast::Unspecified | Ast::Struct(_) => {
                return false
            }
            _ => work.extend(children(e)),
        }
    }
    true
}

fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Ast::Call(c) => c
            .target
            .as_deref()
            .into_iter()
            .chain(c.args.iter())
            .collect(),
        Ast::Comprehension(c) => vec![
            &*c.iter_range,
            &*c.accu_init,
            &*c.loop_cond,
            &*c.loop_step,
            &*c.result,
        ],
        Ast::List(l) => l.elements.iter().collect(),
        Ast::Map(m) => entries(&m.entries),
        Ast::Struct(s) => entries(&s.entries),
        Ast::Select(s) => vec![&*s.operand],
        Ast::Ident(_) | Ast::Literal(_) | Ast::Unspecified => Vec::new(),
    }
}

fn entries(entries: &[cel_parser::ast::IdedEntryExpr]) -> Vec<&IdedExpr> {
    entries
        .iter()
        .flat_map(|en| match &en.expr {
            EntryExpr::StructField(f) => vec![&f.value],
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        })
        .collect()
}

/// Whether two conditions can never both hold (see the module docs).
pub(super) fn excludes(a: &IdedExpr, b: &IdedExpr) -> bool {
    if let Some(inner) = negated(a) {
        if same(inner, b) {
            return true;
        }
    }
    if let Some(inner) = negated(b) {
        if same(inner, a) {
            return true;
        }
    }
    let (Some((op_a, l_a, r_a)), Some((op_b, l_b, r_b))) = (comparison(a), comparison(b)) else {
        return false;
    };
    let opposite = |x: &str, y: &str| {
        matches!(
            (x, y),
            (operators::EQUALS, operators::NOT_EQUALS)
                | (operators::NOT_EQUALS, operators::EQUALS)
                | (operators::LESS, operators::GREATER_EQUALS)
                | (operators::GREATER_EQUALS, operators::LESS)
                | (operators::GREATER, operators::LESS_EQUALS)
                | (operators::LESS_EQUALS, operators::GREATER)
        )
    };
    if same(l_a, l_b) && same(r_a, r_b) && opposite(op_a, op_b) {
        return true;
    }
    // `x == 1` and `x == 2` (either side the literal).
    if op_a == operators::EQUALS && op_b == operators::EQUALS {
        let pairs = [
            (l_a, r_a, l_b, r_b),
            (l_a, r_a, r_b, l_b),
            (r_a, l_a, l_b, r_b),
            (r_a, l_a, r_b, l_b),
        ];
        return pairs.iter().any(|&(xa, va, xb, vb)| {
            same(xa, xb)
                && matches!((&va.expr, &vb.expr), (Ast::Literal(p), Ast::Literal(q)) if distinct(p, q))
        });
    }
    false
}

/// `!x` → `x`.
fn negated(e: &IdedExpr) -> Option<&IdedExpr> {
    match &e.expr {
        Ast::Call(c)
            if c.func_name == operators::LOGICAL_NOT && c.args.len() == 1 && c.target.is_none() =>
        {
            Some(&c.args[0])
        }
        _ => None,
    }
}

fn comparison(e: &IdedExpr) -> Option<(&str, &IdedExpr, &IdedExpr)> {
    match &e.expr {
        Ast::Call(c) if c.target.is_none() && c.args.len() == 2 => {
            let op = c.func_name.as_str();
            [
                operators::EQUALS,
                operators::NOT_EQUALS,
                operators::LESS,
                operators::LESS_EQUALS,
                operators::GREATER,
                operators::GREATER_EQUALS,
            ]
            .contains(&op)
            .then(|| (op, &c.args[0], &c.args[1]))
        }
        _ => None,
    }
}

/// Two literals that are different values of the same type (so `x == p`
/// and `x == q` exclude each other; `1` and `1.0` may be equal, not claimed).
fn distinct(p: &Val, q: &Val) -> bool {
    match (p, q) {
        (Val::String(a), Val::String(b)) => a != b,
        (Val::Boolean(a), Val::Boolean(b)) => a != b,
        (Val::Int(a), Val::Int(b)) => a != b,
        (Val::UInt(a), Val::UInt(b)) => a != b,
        (Val::Bytes(a), Val::Bytes(b)) => a != b,
        _ => false,
    }
}

/// Entries of the same kinds, field names and optional flags, in order (their
/// keys and values are compared as children).
fn same_entries(
    a: &[cel_parser::ast::IdedEntryExpr],
    b: &[cel_parser::ast::IdedEntryExpr],
) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (&x.expr, &y.expr) {
            (EntryExpr::MapEntry(p), EntryExpr::MapEntry(q)) => p.optional == q.optional,
            (EntryExpr::StructField(p), EntryExpr::StructField(q)) => {
                p.field == q.field && p.optional == q.optional
            }
            _ => false,
        })
}

/// Structural equality, ignoring the node ids the parser numbers.
fn same(a: &IdedExpr, b: &IdedExpr) -> bool {
    let mut work = vec![(a, b)];
    while let Some((a, b)) = work.pop() {
        let ok = match (&a.expr, &b.expr) {
            (Ast::Ident(x), Ast::Ident(y)) => x == y,
            (Ast::Literal(x), Ast::Literal(y)) => x == y,
            (Ast::Select(x), Ast::Select(y)) => x.field == y.field && x.test == y.test,
            (Ast::Call(x), Ast::Call(y)) => {
                x.func_name == y.func_name
                    && x.args.len() == y.args.len()
                    && x.target.is_some() == y.target.is_some()
            }
            (Ast::List(x), Ast::List(y)) => x.elements.len() == y.elements.len(),
            // Keys and values are compared below, entry by entry in order
            // (`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` are not claimed equal).
            (Ast::Map(x), Ast::Map(y)) => same_entries(&x.entries, &y.entries),
            (Ast::Struct(x), Ast::Struct(y)) => {
                x.type_name == y.type_name && same_entries(&x.entries, &y.entries)
            }
            (Ast::Comprehension(x), Ast::Comprehension(y)) => {
                x.iter_var == y.iter_var && x.iter_var2 == y.iter_var2 && x.accu_var == y.accu_var
            }
            _ => false,
        };
        if !ok {
            return false;
        }
        let (ca, cb) = (children(a), children(b));
        if ca.len() != cb.len() {
            return false;
        }
        work.extend(ca.into_iter().zip(cb));
    }
    true
}
