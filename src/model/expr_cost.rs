//! What evaluating a CEL condition may cost, bounded before it runs.
//!
//! CEL terminates, but a comprehension over a list taken from the variables
//! runs once per element, and comprehensions nest: `a.all(x, b.all(y, ...))`
//! over two lists of 10⁴ items is 10⁸ steps of host CPU from a 70-character
//! condition. `cel-interpreter` has no cost limit of its own, so before an
//! evaluation the expression's syntax tree is walked once with the sizes of
//! the actual variables, giving an upper bound of the work; an expression
//! whose bound is over [`BUDGET`] is not evaluated at all (it fails with
//! `SUTRA.RUNTIME.CONDITION.BUDGET_EXCEEDED`). The walk is linear in the
//! expression's length, whatever the variables hold.
//!
//! The bound is conservative (it may refuse an expression that would in fact
//! stop early) and its units are calibrated so that a budget's worth of the
//! most expensive construct, comprehension steps, takes in the order of
//! 10–20 ms on one core (see `benches/README.md`, "Condition budget"):
//! - every node of the tree costs [`NODE`];
//! - a comprehension costs its range's length × (its step and condition +
//!   [`STEP`]) — the interpreter opens a scope and binds a variable per step;
//! - `+` on lists or strings copies both sides, [`COPY`] per item (the
//!   interpreter's accumulator in `map`/`filter` is shared, so each append
//!   copies it: a `map` is quadratic in its list's length);
//! - comparing, searching or converting a value costs its weight (the
//!   elements and bytes it holds, deeply); a regular expression its pattern
//!   × [`REGEX`].

use cel_parser::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::{Map, Value};

/// The most cost units one evaluation may use.
pub const BUDGET: u64 = 3_000_000;

/// Cost of visiting one node of the tree.
const NODE: u64 = 1;
/// Cost of one comprehension step beyond its body (scope, binding).
const STEP: u64 = 100;
/// Cost per item or byte a `+` copies (an accumulator's items are cloned).
const COPY: u64 = 2;
/// Cost per byte of a regular expression's pattern (it is compiled per call).
const REGEX: u64 = 64;

/// A bound on a value: `len` bounds its own length (items of a list or map,
/// bytes of a string), `weight` everything it holds, deeply (so any value
/// inside it has a length of at most `weight`), `item` the weight of any one
/// of its items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    len: u64,
    weight: u64,
    item: u64,
}

impl Size {
    const SCALAR: Size = Size {
        len: 0,
        weight: 1,
        item: 0,
    };

    /// Any value of this weight or less.
    fn within(weight: u64) -> Size {
        Size {
            len: weight,
            weight,
            item: weight,
        }
    }

    /// A bound on any one item of this value.
    fn item(self) -> Size {
        Size::within(self.item)
    }

    fn join(self, other: Size) -> Size {
        Size {
            len: self.len.max(other.len),
            weight: self.weight.max(other.weight),
            item: self.item.max(other.item),
        }
    }
}

/// The cost bound of evaluating `expr` over `vars`, in cost units.
pub fn bound(expr: &IdedExpr, vars: &Map<String, Value>) -> u64 {
    let mut walk = Walk {
        vars,
        measured: Default::default(),
        scopes: Vec::new(),
    };
    walk.visit(expr).0
}

/// Whether `expr` may loop over data: a comprehension (`all`, `exists`,
/// `map`, `filter`...) or a regular expression. Such an expression can use
/// its whole budget (tens of milliseconds); one without is linear in the
/// variables it reads. The runtime steps a process holding one off the async
/// executor (`runtime::deployed`, `Deployed::offload`).
pub fn may_iterate(expr: &IdedExpr) -> bool {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => false,
        Expr::Comprehension(_) => true,
        Expr::Select(sel) => may_iterate(&sel.operand),
        Expr::List(list) => list.elements.iter().any(may_iterate),
        Expr::Map(map) => entries_iterate(map.entries.iter()),
        Expr::Struct(st) => entries_iterate(st.entries.iter()),
        Expr::Call(call) => {
            call.func_name == "matches"
                || call.target.iter().any(|t| may_iterate(t))
                || call.args.iter().any(may_iterate)
        }
    }
}

fn entries_iterate<'e>(
    mut entries: impl Iterator<Item = &'e cel_parser::ast::IdedEntryExpr>,
) -> bool {
    entries.any(|entry| match &entry.expr {
        EntryExpr::StructField(f) => may_iterate(&f.value),
        EntryExpr::MapEntry(m) => may_iterate(&m.key) || may_iterate(&m.value),
    })
}

struct Walk<'a> {
    vars: &'a Map<String, Value>,
    /// Sizes of variables already measured, by address (a variable named
    /// many times is measured once).
    measured: std::collections::HashMap<usize, Size>,
    /// Comprehension variables in scope, innermost last.
    scopes: Vec<(String, Size)>,
}

impl<'a> Walk<'a> {
    fn visit(&mut self, e: &IdedExpr) -> (u64, Size) {
        match &e.expr {
            Expr::Unspecified => (NODE, Size::SCALAR),
            Expr::Literal(v) => (NODE, literal_size(v)),
            Expr::Ident(name) => (NODE, self.ident(name)),
            Expr::Select(sel) => match self.resolve(e) {
                Some(v) => (NODE, self.measure(v)),
                None => {
                    let (cost, operand) = self.visit(&sel.operand);
                    (add(cost, NODE), operand.item())
                }
            },
            Expr::List(list) => {
                let mut cost = NODE;
                let mut size = Size {
                    len: list.elements.len() as u64,
                    weight: 1,
                    item: 0,
                };
                for item in &list.elements {
                    let (c, s) = self.visit(item);
                    cost = add(cost, c);
                    size.weight = add(size.weight, s.weight);
                    size.item = size.item.max(s.weight);
                }
                (add(cost, size.len), size)
            }
            Expr::Map(map) => self.entries(map.entries.iter()),
            Expr::Struct(st) => self.entries(st.entries.iter()),
            Expr::Call(call) => {
                let mut cost = NODE;
                let mut args = Vec::with_capacity(call.args.len() + 1);
                for a in call.target.iter().map(|t| &**t).chain(call.args.iter()) {
                    let (c, s) = self.visit(a);
                    cost = add(cost, c);
                    args.push(s);
                }
                let (work, size) = call_cost(&call.func_name, &args);
                (add(cost, work), size)
            }
            Expr::Comprehension(c) => {
                let (range_cost, range) = self.visit(&c.iter_range);
                let (init_cost, init) = self.visit(&c.accu_init);
                let item = range.item();
                self.scopes.push((c.iter_var.clone(), item));
                if let Some(v2) = &c.iter_var2 {
                    self.scopes.push((v2.clone(), item));
                }
                // The accumulator grows at most by what one step adds, once
                // per item (the macros' steps are `accu + [x]`, `accu && p`,
                // `p ? accu + 1 : accu`): measure one step from the initial
                // value, then bound every step with the final one.
                self.scopes.push((c.accu_var.clone(), init));
                let (_, first) = self.visit(&c.loop_step);
                let grown = Size {
                    len: add(init.len, mul(range.len, first.len.saturating_sub(init.len))),
                    weight: add(
                        init.weight,
                        mul(range.len, first.weight.saturating_sub(init.weight)),
                    ),
                    item: first.item,
                }
                .join(init);
                if let Some(last) = self.scopes.last_mut() {
                    last.1 = grown;
                }
                let (step_cost, _) = self.visit(&c.loop_step);
                let (cond_cost, _) = self.visit(&c.loop_cond);
                let (result_cost, result) = self.visit(&c.result);
                let pops = if c.iter_var2.is_some() { 3 } else { 2 };
                self.scopes.truncate(self.scopes.len().saturating_sub(pops));
                let per_step = add(add(step_cost, cond_cost), STEP);
                let cost = add(
                    add(add(range_cost, init_cost), result_cost),
                    mul(range.len, per_step),
                );
                (cost, result)
            }
        }
    }

    fn entries<'e>(
        &mut self,
        entries: impl Iterator<Item = &'e cel_parser::ast::IdedEntryExpr>,
    ) -> (u64, Size) {
        let mut cost = NODE;
        let mut size = Size {
            len: 0,
            weight: 1,
            item: 0,
        };
        for entry in entries {
            let (key, value) = match &entry.expr {
                EntryExpr::StructField(f) => (None, &f.value),
                EntryExpr::MapEntry(m) => (Some(&m.key), &m.value),
            };
            size.len = add(size.len, 1);
            for part in key.into_iter().chain(Some(value)) {
                let (c, s) = self.visit(part);
                cost = add(cost, c);
                size.weight = add(size.weight, s.weight);
                size.item = size.item.max(s.weight);
            }
        }
        (add(cost, size.len), size)
    }

    fn ident(&mut self, name: &str) -> Size {
        if let Some((_, s)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return *s;
        }
        let vars = self.vars;
        match vars.get(name) {
            Some(v) => self.measure(v),
            None => Size::SCALAR,
        }
    }

    fn measure(&mut self, v: &Value) -> Size {
        *self
            .measured
            .entry(v as *const Value as usize)
            .or_insert_with(|| json_size(v))
    }

    /// The variable a chain of field selections names, when it is one
    /// (`order.lines`), so its bound is its actual size.
    fn resolve(&self, e: &IdedExpr) -> Option<&'a Value> {
        match &e.expr {
            Expr::Ident(name) => {
                if self.scopes.iter().any(|(n, _)| n == name) {
                    return None;
                }
                self.vars.get(name)
            }
            Expr::Select(sel) if !sel.test => self.resolve(&sel.operand)?.get(&sel.field),
            _ => None,
        }
    }
}

/// The work of calling `func` on arguments of these sizes (beyond
/// evaluating them), and a bound on its result.
fn call_cost(func: &str, args: &[Size]) -> (u64, Size) {
    let weights = args.iter().fold(0u64, |w, s| add(w, s.weight));
    let first = args.first().copied().unwrap_or(Size::SCALAR);
    match func {
        "_+_" => {
            let size = args.iter().fold(Size::default(), |acc, s| Size {
                len: add(acc.len, s.len),
                weight: add(acc.weight, s.weight),
                item: acc.item.max(s.item),
            });
            (add(mul(size.len, COPY), NODE), size)
        }
        "_[_]" | "_[?_]" => (NODE, first.item()),
        "_?_:_" => {
            let size = args
                .iter()
                .skip(1)
                .fold(Size::SCALAR, |acc, s| acc.join(*s));
            (NODE, size)
        }
        "_&&_" | "_||_" | "!_" | "-_" | "size" | "has" | "@not_strictly_false" => {
            (NODE, Size::SCALAR)
        }
        "matches" => {
            let pattern = args.get(1).copied().unwrap_or(first);
            (add(mul(pattern.weight, REGEX), weights), Size::SCALAR)
        }
        // Comparisons, membership, searches, conversions, arithmetic: the
        // work is at most linear in what the arguments hold; a result is no
        // larger than the arguments together (a string of a number: 32 bytes).
        _ => (add(weights, NODE), Size::within(weights.max(32))),
    }
}

fn literal_size(v: &cel_parser::reference::Val) -> Size {
    use cel_parser::reference::Val;
    match v {
        Val::String(s) => text(s.len()),
        Val::Bytes(b) => text(b.len()),
        _ => Size::SCALAR,
    }
}

fn text(len: usize) -> Size {
    Size {
        len: len as u64,
        weight: len.max(1) as u64,
        item: 1,
    }
}

fn json_size(v: &Value) -> Size {
    let items = |weights: &mut dyn Iterator<Item = u64>, len: usize| {
        let (weight, item) = weights.fold((1u64, 0u64), |(w, i), x| (add(w, x), i.max(x)));
        Size {
            len: len as u64,
            weight,
            item,
        }
    };
    match v {
        Value::String(s) => text(s.len()),
        Value::Array(a) => items(&mut a.iter().map(|i| json_size(i).weight), a.len()),
        Value::Object(m) => items(
            &mut m
                .iter()
                .map(|(k, i)| add(k.len() as u64, json_size(i).weight)),
            m.len(),
        ),
        _ => Size::SCALAR,
    }
}

fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::Code;
    use crate::model::Expr;
    use serde_json::json;

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn list(n: usize) -> Value {
        Value::Array((0..n).map(|i| json!(i)).collect())
    }

    #[test]
    fn a_nested_comprehension_over_large_start_variables_is_refused_unevaluated() {
        // The condition from the hostile-tenant report: 10⁸ steps.
        let e =
            Expr::parse("a.all(x, b.all(y, x + y >= 0)) && a.exists(x, x < 0) == false").unwrap();
        let err = e
            .eval_bool(&vars(json!({ "a": list(10_000), "b": list(10_000) })))
            .unwrap_err();
        assert!(err.over_budget, "{err}");
        assert_eq!(err.code(), Code::ConditionBudgetExceeded);
        // The same condition over small lists evaluates as before.
        assert!(e
            .eval_bool(&vars(json!({ "a": list(30), "b": list(30) })))
            .unwrap());
    }

    #[test]
    fn ordinary_conditions_stay_well_within_the_budget_whatever_the_variables_hold() {
        let big = vars(json!({
            "amount": 150,
            "customer": { "tier": "gold", "notes": "x".repeat(500_000) },
            "lines": list(50_000),
        }));
        for text in [
            "amount > 100 && customer.tier == 'gold'",
            "size(lines) > 3",
            "lines[7] == 7",
            "has(customer.tier)",
        ] {
            let e = Expr::parse(text).unwrap();
            let cost = e.cost_bound(&big).unwrap();
            assert!(cost < 100, "`{text}` bounded at {cost}");
            e.eval(&big).unwrap();
        }
        // One comprehension over a list of a thousand is fine.
        let e = Expr::parse("lines.exists(l, l == 999)").unwrap();
        assert!(e.eval_bool(&vars(json!({ "lines": list(1000) }))).unwrap());
        let e = Expr::parse("size(lines.map(l, [l])) == 1000").unwrap();
        assert!(e.eval_bool(&vars(json!({ "lines": list(1000) }))).unwrap());
    }

    #[test]
    fn the_bound_follows_copies_comparisons_and_literal_lists() {
        let v = vars(json!({ "s": "y".repeat(3_000_000), "l": list(10) }));
        // Comparing a 3 MB string costs its length: over the budget.
        let e = Expr::parse("s == s").unwrap();
        assert!(e.eval(&v).unwrap_err().over_budget);
        // A comprehension over a literal list inside one over a variable.
        let e = Expr::parse("l.all(x, [1,2,3].all(y, y > 0))").unwrap();
        assert!(e.eval_bool(&v).unwrap());
        // A map whose step copies a growing accumulator is quadratic.
        let e = Expr::parse("size(l.map(x, x)) == 10").unwrap();
        assert!(e.eval_bool(&v).unwrap());
        let many = vars(json!({ "l": list(20_000) }));
        assert!(e.eval(&many).unwrap_err().over_budget);
    }

    #[test]
    fn a_condition_that_may_loop_over_data_is_told_apart_at_load() {
        for text in [
            "lines.exists(l, l.qty > 10)",
            "size(lines.map(l, l.price)) > 0",
            "order.id.matches('^[a-z]+$')",
            "amount > 10 && [lines.all(x, x > 0)][0]",
            "{'k': items.filter(i, i > 1)}.k == []",
        ] {
            assert!(Expr::parse(text).unwrap().may_iterate(), "`{text}`");
        }
        for text in [
            "amount > 100",
            "customer.tier == 'gold' && size(lines) < 5",
            "'x' in tags",
            "has(order.id) ? order.id : 'none'",
        ] {
            assert!(!Expr::parse(text).unwrap().may_iterate(), "`{text}`");
        }
    }

    #[test]
    fn a_process_is_stepped_off_the_executor_when_a_condition_or_key_may_loop() {
        let process = |flow_condition: &str, key: &str| {
            let source = format!(
                r#"<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
                  <bpmn:message id="Paid" name="paid"/>
                  <bpmn:process id="p" isExecutable="true">
                    <bpmn:startEvent id="s"/>
                    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="gw"/>
                    <bpmn:exclusiveGateway id="gw" default="f3"/>
                    <bpmn:sequenceFlow id="f2" sourceRef="gw" targetRef="wait">
                      <bpmn:conditionExpression>{flow_condition}</bpmn:conditionExpression>
                    </bpmn:sequenceFlow>
                    <bpmn:sequenceFlow id="f3" sourceRef="gw" targetRef="wait"/>
                    <bpmn:intermediateCatchEvent id="wait">
                      <bpmn:extensionElements><q:correlation key="{key}"/></bpmn:extensionElements>
                      <bpmn:messageEventDefinition messageRef="Paid"/>
                    </bpmn:intermediateCatchEvent>
                    <bpmn:sequenceFlow id="f4" sourceRef="wait" targetRef="e"/>
                    <bpmn:endEvent id="e"/>
                  </bpmn:process>
                </bpmn:definitions>"#
            );
            let loaded = crate::dialect::load(&source);
            assert!(loaded.ok(), "{:?}", loaded.diagnostics);
            loaded.definitions.processes[0].has_iterating_expressions()
        };
        assert!(!process("amount &gt; 10", "order.id"));
        assert!(process("lines.exists(l, l.qty &gt; 10)", "order.id"));
        assert!(process(
            "amount &gt; 10",
            "order.refs.filter(r, r != '').size()"
        ));
    }
}
