//! What a condition at its cost budget costs in time: for each of the most
//! expensive constructs (nested comprehensions, a `map` copying its
//! accumulator, comparing long strings), the variables are sized so that the
//! bound sits just under `model::CONDITION_BUDGET`, and the evaluation is
//! timed (median of 9). The budget's claim, "about 10 ms of one core", is
//! checked here, never in a test.
//!
//! `cargo bench --bench conditions`

use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};
use sutra::model::{Expr, CONDITION_BUDGET};

/// Variables sized by `n`.
type Vars = dyn Fn(usize) -> Map<String, Value>;

fn list(n: usize) -> Value {
    Value::Array((0..n).map(|i| json!(i)).collect())
}

/// The largest `n` whose variables keep the bound under the budget.
fn largest(expr: &Expr, vars: impl Fn(usize) -> Map<String, Value>) -> usize {
    let (mut lo, mut hi) = (1usize, 1usize << 24);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if expr.cost_bound(&vars(mid)).unwrap_or(u64::MAX) <= CONDITION_BUDGET {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn median(expr: &Expr, vars: &Map<String, Value>) -> Duration {
    let mut times: Vec<Duration> = (0..9)
        .map(|_| {
            let t = Instant::now();
            let r = expr.eval(vars);
            let e = t.elapsed();
            assert!(r.is_ok(), "{r:?}");
            e
        })
        .collect();
    times.sort();
    times[4]
}

fn main() {
    println!("budget: {CONDITION_BUDGET} units");
    let cases: Vec<(&str, Box<Vars>)> = vec![
        (
            "a.all(x, b.all(y, x + y >= 0))",
            Box::new(|n| {
                json!({ "a": list(n), "b": list(n) })
                    .as_object()
                    .cloned()
                    .unwrap()
            }),
        ),
        (
            "a.exists(x, x == -1) || true",
            Box::new(|n| json!({ "a": list(n) }).as_object().cloned().unwrap()),
        ),
        (
            "size(a.map(x, [x])) > 0",
            Box::new(|n| json!({ "a": list(n) }).as_object().cloned().unwrap()),
        ),
        (
            "size(a.filter(x, x % 2u == 0u)) >= 0",
            Box::new(|n| json!({ "a": list(n) }).as_object().cloned().unwrap()),
        ),
        (
            "s == t",
            Box::new(|n| {
                json!({ "s": "x".repeat(n), "t": "x".repeat(n) })
                    .as_object()
                    .cloned()
                    .unwrap()
            }),
        ),
        (
            "s.contains('y')",
            Box::new(|n| json!({ "s": "x".repeat(n) }).as_object().cloned().unwrap()),
        ),
    ];
    println!("| condition | largest n under the budget | bound | time (median of 9) |");
    println!("| --- | ---: | ---: | ---: |");
    for (text, vars) in cases {
        let expr = Expr::parse(text).unwrap();
        let n = largest(&expr, &vars);
        let v = vars(n);
        let bound = expr.cost_bound(&v).unwrap();
        let t = median(&expr, &v);
        println!(
            "| `{text}` | {n} | {bound} | {:.2} ms |",
            t.as_secs_f64() * 1e3
        );
    }
}
