//! Evaluating a JSONata expression (`model::Jsonata`) of the States
//! language: `$states` (`input`, `context`, and `result` / `errorOutput`
//! where the node has them) and the variables in sight are bound; the
//! result is plain JSON.
//!
//! The budget is the one CEL conditions have (`SUTRA.RUNTIME.CONDITION.
//! BUDGET_EXCEEDED`), counted, never timed, so a replay ends the same way:
//! at most [`MAX_STEPS`] evaluated nodes, a nesting of [`MAX_DEPTH`], and
//! an arena of [`MAX_BYTES`] (the evaluation stops once half is used). The
//! evaluation runs on a worker thread with a large stack (a deep value or
//! recursion never overflows the caller's; each calling thread has its own
//! worker and waits for its answer), and a panic inside the library is
//! caught and becomes a `States.QueryEvaluationError`.
//!
//! Pure: `$now()`/`$millis()` are the state's entry time from the context
//! object; `$random()` and `$uuid()` come from the step's draw.

use super::document::{DocError, DocResult, Scope, VARS_KEY};
use crate::codes::Code;
use crate::model::{Intrinsic, Jsonata};
use bumpalo::Bump;
use jsonata_rs::{ArrayFlags, FunctionContext, JsonAta, Value as JValue};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;

/// The most expression nodes one evaluation may evaluate (calibrated with
/// the CEL budget: a budget's worth costs tens of milliseconds).
pub const MAX_STEPS: usize = 300_000;
/// The deepest nesting of evaluation (recursion included).
pub const MAX_DEPTH: usize = 2_000;
/// The arena's hard limit; the evaluation stops past half of it.
pub const MAX_BYTES: usize = 128 * 1024 * 1024;
/// The deepest value converted back to JSON.
const MAX_VALUE_DEPTH: usize = 512;
/// The evaluating thread's stack.
const STACK: usize = 256 * 1024 * 1024;

/// What the natives of one evaluation see.
struct Natives {
    now: String,
    millis: f64,
    rng: u64,
}

thread_local! {
    static NATIVES: RefCell<Natives> = const {
        RefCell::new(Natives { now: String::new(), millis: 0.0, rng: 0 })
    };
}

fn budget(what: &str) -> DocError {
    DocError::new(
        Code::ConditionBudgetExceeded,
        format!("{what}: the evaluation was stopped at its budget ({MAX_STEPS} steps, a nesting of {MAX_DEPTH}, {} MiB)", MAX_BYTES / 2 / 1024 / 1024),
    )
}

fn query_error(what: &str, why: impl std::fmt::Display) -> DocError {
    DocError::new(Code::StatesQueryEvaluationError, format!("{what}: {why}"))
}

/// Evaluate `j` with `$states.input` = `input` (undefined → `null`).
pub fn eval(j: &Jsonata, input: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    let what = format!("{{% {} %}}", j.source());
    let mut context = scope.context.clone();
    let vars = match context.as_object_mut().and_then(|c| c.remove(VARS_KEY)) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let mut states = Map::new();
    states.insert("input".into(), input.clone());
    states.insert("context".into(), context.clone());
    if let Some(r) = &scope.result {
        states.insert("result".into(), r.clone());
    }
    if let Some(e) = &scope.error_output {
        states.insert("errorOutput".into(), e.clone());
    }
    let now = context
        .pointer("/State/EnteredTime")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let millis = chrono::DateTime::parse_from_rfc3339(&now)
        .map(|t| t.timestamp_millis() as f64)
        .unwrap_or(0.0);
    let natives = Natives {
        now,
        millis,
        rng: scope.draws.next_u64(),
    };
    let job = Job {
        source: j.source().to_string(),
        states: Value::Object(states),
        vars,
        natives,
    };
    match on_worker(job) {
        Err(why) => Err(query_error(&what, why)),
        Ok(None) => Err(query_error(
            &what,
            "the evaluation failed inside the JSONata library",
        )),
        Ok(Some(Err(Failure::Budget))) => Err(budget(&what)),
        Ok(Some(Err(Failure::Error(why)))) => Err(query_error(&what, why)),
        Ok(Some(Ok(v))) => Ok(v),
    }
}

/// One evaluation, handed to the worker.
struct Job {
    source: String,
    states: Value,
    vars: Map<String, Value>,
    natives: Natives,
}

/// What the worker answers: `None` when the library panicked.
type Answer = Option<Result<Value, Failure>>;

/// A thread with a large stack that evaluates for the thread that started
/// it (one per calling thread, started at its first JSONata evaluation; it
/// ends when that thread does, its channel dropped).
struct Worker {
    jobs: std::sync::mpsc::Sender<Job>,
    answers: std::sync::mpsc::Receiver<Answer>,
}

thread_local! {
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
}

fn run_job(job: Job) -> Answer {
    NATIVES.with(|n| *n.borrow_mut() = job.natives);
    let arena = Bump::new();
    arena.set_allocation_limit(Some(MAX_BYTES));
    let out = crate::model::quietly_why(std::panic::AssertUnwindSafe(|| {
        evaluate(&arena, &job.source, &job.states, &job.vars)
    }));
    // An allocation that met the arena's limit panics in the library
    // (bumpalo's "out of memory"): the memory budget.
    match out {
        Err(why) if why.contains("out of memory") => Some(Err(Failure::Budget)),
        Err(_) => None,
        Ok(v) => Some(v),
    }
}

fn spawn_worker() -> Result<Worker, String> {
    let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
    let (answer_tx, answers) = std::sync::mpsc::channel::<Answer>();
    std::thread::Builder::new()
        .name("sutra-jsonata".into())
        .stack_size(STACK)
        .spawn(move || {
            while let Ok(job) = job_rx.recv() {
                if answer_tx.send(run_job(job)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| format!("no thread to evaluate on: {e}"))?;
    Ok(Worker { jobs, answers })
}

fn on_worker(job: Job) -> Result<Answer, String> {
    WORKER.with(|w| {
        let mut w = w.borrow_mut();
        if w.is_none() {
            *w = Some(spawn_worker()?);
        }
        let worker = w.as_ref().ok_or("no worker")?;
        let answer = worker
            .jobs
            .send(job)
            .ok()
            .and_then(|()| worker.answers.recv().ok());
        match answer {
            Some(a) => Ok(a),
            None => {
                // The worker is gone (it cannot panic, but a thread can die): a new one next time.
                *w = None;
                Err("the JSONata worker stopped".to_string())
            }
        }
    })
}

enum Failure {
    Budget,
    Error(String),
}

fn evaluate(
    arena: &Bump,
    source: &str,
    states: &Value,
    vars: &Map<String, Value>,
) -> Result<Value, Failure> {
    let j = JsonAta::new(source, arena).map_err(|e| Failure::Error(e.to_string()))?;
    for (name, v) in vars {
        j.assign_var(name, j.json_value_to_value(v));
    }
    j.assign_var("states", j.json_value_to_value(states));
    j.register_function("now", 0, fn_now);
    j.register_function("millis", 0, fn_millis);
    j.register_function("random", 0, fn_random);
    j.register_function("uuid", 0, fn_uuid);
    j.register_function("partition", 2, fn_partition);
    j.register_function("range", 3, fn_range);
    j.register_function("hash", 2, fn_hash);
    j.register_function("parse", 1, fn_parse);
    let out = j
        .evaluate_timeboxed(None, Some(MAX_DEPTH), Some(MAX_STEPS))
        .map_err(|e| match e {
            // A range over 10⁷ items is the library's own bound: the budget too.
            jsonata_rs::Error::U1001StackOverflow
            | jsonata_rs::Error::U1001Timeout
            | jsonata_rs::Error::D2014RangeOutOfBounds(..) => Failure::Budget,
            other => Failure::Error(other.to_string()),
        })?;
    to_json(out, 0)
        .map(|v| v.unwrap_or(Value::Null))
        .map_err(Failure::Error)
}

/// A JSONata value as JSON (`None`: undefined, left out of arrays and objects).
fn to_json<'a>(v: &'a JValue<'a>, depth: usize) -> Result<Option<Value>, String> {
    if depth > MAX_VALUE_DEPTH {
        return Err(format!("the value nests deeper than {MAX_VALUE_DEPTH}"));
    }
    Ok(Some(match v {
        JValue::Undefined => return Ok(None),
        JValue::Null => Value::Null,
        JValue::Bool(b) => Value::Bool(*b),
        JValue::Number(n) => number(*n)?,
        JValue::String(s) => Value::String(s.to_string()),
        JValue::Array(..) | JValue::Range(..) => {
            let mut out = Vec::with_capacity(v.len());
            for m in v.members() {
                if let Some(x) = to_json(m, depth + 1)? {
                    out.push(x);
                }
            }
            Value::Array(out)
        }
        JValue::Object(_) => {
            let mut out = Map::new();
            for (k, m) in v.entries() {
                if let Some(x) = to_json(m, depth + 1)? {
                    out.insert(k.to_string(), x);
                }
            }
            Value::Object(out)
        }
        _ => {
            return Err(
                "the expression yields a function or a regular expression, not a JSON value".into(),
            )
        }
    }))
}

fn number(n: f64) -> Result<Value, String> {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        return Ok(Value::Number(Number::from(n as i64)));
    }
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| format!("the number {n} is not finite"))
}

/// JSON into the arena (for the natives' results).
fn to_value<'a>(arena: &'a Bump, v: &Value) -> &'a JValue<'a> {
    match v {
        Value::Null => JValue::null(arena),
        Value::Bool(b) => JValue::bool(*b),
        Value::Number(n) => JValue::number(arena, n.as_f64().unwrap_or(0.0)),
        Value::String(s) => JValue::string(arena, s),
        Value::Array(a) => {
            let out = JValue::array_with_capacity(arena, a.len(), ArrayFlags::empty());
            for x in a {
                out.push(to_value(arena, x));
            }
            out
        }
        Value::Object(o) => {
            let out = JValue::object_with_capacity(arena, o.len());
            for (k, x) in o {
                out.insert(k, to_value(arena, x));
            }
            out
        }
    }
}

type NativeResult<'a> = jsonata_rs::Result<&'a JValue<'a>>;

fn native_error(name: &str, why: impl std::fmt::Display) -> jsonata_rs::Error {
    jsonata_rs::Error::D3137Error(format!("${name}: {why}"))
}

fn arg_json<'a>(name: &str, args: &[&'a JValue<'a>], i: usize) -> jsonata_rs::Result<Value> {
    let v = args.get(i).copied().unwrap_or_else(JValue::undefined);
    to_json(v, 0)
        .map_err(|e| native_error(name, e))?
        .ok_or_else(|| native_error(name, format!("argument {} is missing", i + 1)))
}

fn next_random() -> u64 {
    NATIVES.with(|n| {
        // splitmix64 over the step's draw.
        let mut n = n.borrow_mut();
        n.rng = n.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = n.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn fn_now<'a>(ctx: FunctionContext<'a, '_>, _: &[&'a JValue<'a>]) -> NativeResult<'a> {
    Ok(NATIVES.with(|n| JValue::string(ctx.arena, &n.borrow().now)))
}

fn fn_millis<'a>(ctx: FunctionContext<'a, '_>, _: &[&'a JValue<'a>]) -> NativeResult<'a> {
    Ok(NATIVES.with(|n| JValue::number(ctx.arena, n.borrow().millis)))
}

fn fn_random<'a>(ctx: FunctionContext<'a, '_>, _: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let x = (next_random() >> 11) as f64 / (1u64 << 53) as f64;
    Ok(JValue::number(ctx.arena, x))
}

fn fn_uuid<'a>(ctx: FunctionContext<'a, '_>, _: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let mut b = [0u8; 32];
    for chunk in b.chunks_mut(8) {
        chunk.copy_from_slice(&next_random().to_le_bytes());
    }
    Ok(JValue::string(ctx.arena, &super::intrinsics::uuid(b)))
}

/// `$partition(array, size)`: chunks of `size` (AWS's function).
fn fn_partition<'a>(ctx: FunctionContext<'a, '_>, args: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let Value::Array(items) = arg_json("partition", args, 0)? else {
        return Err(native_error("partition", "argument 1 must be an array"));
    };
    let size = arg_json("partition", args, 1)?
        .as_u64()
        .filter(|n| *n > 0)
        .ok_or_else(|| native_error("partition", "argument 2 must be a positive integer"))?;
    let chunks: Vec<Value> = items
        .chunks(usize::try_from(size).unwrap_or(usize::MAX))
        .map(|c| Value::Array(c.to_vec()))
        .collect();
    Ok(to_value(ctx.arena, &Value::Array(chunks)))
}

/// `$range(start, end, step)`: start to end inclusive (AWS's function; at most 1,000 items).
fn fn_range<'a>(ctx: FunctionContext<'a, '_>, args: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let int = |i: usize| -> jsonata_rs::Result<i64> {
        arg_json("range", args, i)?
            .as_i64()
            .ok_or_else(|| native_error("range", format!("argument {} must be an integer", i + 1)))
    };
    let (start, end, step) = (int(0)?, int(1)?, int(2)?);
    if step == 0 {
        return Err(native_error("range", "the step must not be 0"));
    }
    let mut out = Vec::new();
    let mut x = start;
    while (step > 0 && x <= end) || (step < 0 && x >= end) {
        if out.len() == 1000 {
            return Err(native_error("range", "more than 1000 items"));
        }
        out.push(Value::from(x));
        x = match x.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    Ok(to_value(ctx.arena, &Value::Array(out)))
}

/// `$hash(data, algorithm)`: hex digest (MD5, SHA-1, SHA-256, SHA-384, SHA-512).
fn fn_hash<'a>(ctx: FunctionContext<'a, '_>, args: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let data = match arg_json("hash", args, 0)? {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let Value::String(alg) = arg_json("hash", args, 1)? else {
        return Err(native_error("hash", "argument 2 must be an algorithm name"));
    };
    let digest = super::intrinsics::hash(Intrinsic::Hash, &alg, data.as_bytes())
        .map_err(|e| native_error("hash", e.message))?;
    Ok(JValue::string(ctx.arena, &digest))
}

/// `$parse(text)`: a JSON text as a value.
fn fn_parse<'a>(ctx: FunctionContext<'a, '_>, args: &[&'a JValue<'a>]) -> NativeResult<'a> {
    let Value::String(text) = arg_json("parse", args, 0)? else {
        return Err(native_error("parse", "argument 1 must be a string"));
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| native_error("parse", e))?;
    Ok(to_value(ctx.arena, &v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::document::Draws;
    use serde_json::json;

    fn run(src: &str, input: Value, vars: Value) -> DocResult<Value> {
        let j = Jsonata::parse(src).unwrap();
        let mut context =
            json!({"State": {"Name": "S", "EnteredTime": "2026-01-02T03:04:05.000Z"}});
        if let Value::Object(v) = vars {
            if !v.is_empty() {
                context[VARS_KEY] = Value::Object(v);
            }
        }
        let mut draws = Draws::new("i", 0.5, 1);
        let mut scope = Scope::new(&context, &mut draws);
        scope.result = Some(json!({"r": 7}));
        eval(&j, &input, &mut scope)
    }

    #[test]
    fn states_and_variables_are_bound() {
        assert_eq!(
            run(
                "$states.input.a + $x + $states.result.r",
                json!({"a": 1}),
                json!({"x": 2})
            ),
            Ok(json!(10))
        );
        assert_eq!(
            run("$states.context.State.Name", json!({}), json!({})),
            Ok(json!("S"))
        );
        // The variables are not part of the context the expression sees.
        assert_eq!(
            run("$count($keys($states.context))", json!({}), json!({"x": 1})),
            Ok(json!(1))
        );
        assert_eq!(
            run(
                "{'n': $states.input.items[1], 'u': $states.input.missing}",
                json!({"items": [1, "two", true]}),
                json!({})
            ),
            Ok(json!({"n": "two"}))
        );
        assert_eq!(
            run("$now()", json!({}), json!({})),
            Ok(json!("2026-01-02T03:04:05.000Z"))
        );
        assert_eq!(
            run("$millis()", json!({}), json!({})),
            Ok(json!(1767323045000i64))
        );
    }

    #[test]
    fn aws_functions_are_provided_and_deterministic() {
        assert_eq!(
            run("$partition([1,2,3], 2)", json!({}), json!({})),
            Ok(json!([[1, 2], [3]]))
        );
        assert_eq!(
            run("$range(0, 10, 5)", json!({}), json!({})),
            Ok(json!([0, 5, 10]))
        );
        assert_eq!(
            run("$hash('a', 'SHA-256')", json!({}), json!({})),
            Ok(json!(
                "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
            ))
        );
        assert_eq!(
            run("$parse('{\"a\":[1]}')", json!({}), json!({})),
            Ok(json!({"a": [1]}))
        );
        let a = run("$uuid()", json!({}), json!({})).unwrap();
        assert_eq!(a, run("$uuid()", json!({}), json!({})).unwrap());
        assert_eq!(a.as_str().unwrap().len(), 36);
        let r = run("$random()", json!({}), json!({}))
            .unwrap()
            .as_f64()
            .unwrap();
        assert!((0.0..1.0).contains(&r));
    }

    #[test]
    fn hostile_expressions_end_at_the_budget() {
        for hostile in [
            "$count([1..10000000].($ * 2))",
            "($f := function($x){$f($x)}; $f(1))",
            "($f := function($s){$f($s & $s)}; $f('ab'))",
            "$count([1..100000000])",
        ] {
            let e = run(hostile, json!({}), json!({})).unwrap_err();
            assert!(
                matches!(
                    e.code,
                    Code::ConditionBudgetExceeded | Code::StatesQueryEvaluationError
                ),
                "{hostile}: {e:?}"
            );
        }
        let e = run("($f := function($x){$f($x)}; $f(1))", json!({}), json!({})).unwrap_err();
        assert_eq!(e.code, Code::ConditionBudgetExceeded, "{e:?}");
        let e = run("$error('no')", json!({}), json!({})).unwrap_err();
        assert_eq!(e.code, Code::StatesQueryEvaluationError);
    }
}
