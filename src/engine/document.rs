//! Reading and rewriting a token's document along a node's [`DataFlow`]:
//! paths (RFC 9535 through `serde_json_path`), payload templates, the
//! placement of a result, and the context object `$$`.
//!
//! Pure functions of their arguments: randomness (`States.UUID`,
//! `States.MathRandom`) comes from a [`Draws`] seeded by the step's inputs.

use super::intrinsics;
use crate::codes::Code;
use crate::model::{DataFlow, DocPath, PathRoot, ResultPath, Selection, Step, Template, ValueExpr};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The one key of the start variables that carry an execution input that is
/// no JSON object (a States-language execution takes any JSON value: an
/// array, a string, a number, null). Only a start node with a data flow
/// accepts it; [`input_document`] unwraps it.
pub const INPUT_KEY: &str = "$sutra.input";

/// The start variables as the API and the CLI carry any execution input:
/// an object as it is, any other value wrapped under [`INPUT_KEY`].
pub fn start_variables(input: Value) -> Map<String, Value> {
    match input {
        Value::Object(m) => m,
        other => Map::from_iter([(INPUT_KEY.to_string(), other)]),
    }
}

/// The key of the context object (`docflow::context_of`) under which the
/// variables a node sees travel (`Assign`; inner scopes over outer ones). No
/// context path can name it (`dialect::asl::checks` refuses any first name
/// but the context's own), and reading `$$` leaves it out.
pub const VARS_KEY: &str = "$sutra.variables";

/// The execution input document the start variables carry.
pub fn input_document(vars: &Map<String, Value>) -> Value {
    match vars.get(INPUT_KEY) {
        Some(v) if vars.len() == 1 => v.clone(),
        _ => Value::Object(vars.clone()),
    }
}

/// A data-flow failure: the code it raises and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DocError {
    pub code: Code,
    pub message: String,
}

impl DocError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        DocError {
            code,
            message: message.into(),
        }
    }
}

pub type DocResult<T> = Result<T, DocError>;

/// Deterministic pseudo-random numbers for one step: the runtime's draw,
/// the instance and a counter, hashed.
pub struct Draws {
    seed: Vec<u8>,
    n: u64,
}

impl Draws {
    pub fn new(instance: &str, draw: f64, salt: u64) -> Self {
        let mut seed = instance.as_bytes().to_vec();
        seed.extend_from_slice(&draw.to_bits().to_le_bytes());
        seed.extend_from_slice(&salt.to_le_bytes());
        Draws { seed, n: 0 }
    }

    /// 32 fresh bytes.
    pub fn bytes(&mut self) -> [u8; 32] {
        self.n += 1;
        let mut h = Sha256::new();
        h.update(&self.seed);
        h.update(self.n.to_le_bytes());
        h.finalize().into()
    }

    pub fn next_u64(&mut self) -> u64 {
        let b = self.bytes();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

/// What templates and paths can see besides the value at hand.
pub struct Scope<'a> {
    /// The context object (`$$`), with the variables under [`VARS_KEY`].
    pub context: &'a Value,
    pub draws: &'a mut Draws,
    /// The node's result (JSONata's `$states.result`), while its output and
    /// assignments are computed.
    pub result: Option<Value>,
    /// The error a catcher caught (JSONata's `$states.errorOutput`).
    pub error_output: Option<Value>,
}

impl<'a> Scope<'a> {
    pub fn new(context: &'a Value, draws: &'a mut Draws) -> Self {
        Scope {
            context,
            draws,
            result: None,
            error_output: None,
        }
    }
}

/// Read a path: a reference path yields the value it names (missing → error);
/// a query yields the array of its matches.
pub fn read(path: &DocPath, doc: &Value, context: &Value) -> DocResult<Value> {
    let stripped;
    let root = match path.root {
        PathRoot::Document => doc,
        PathRoot::Context => match context.get(VARS_KEY) {
            None => context,
            Some(_) => {
                let mut c = context.clone();
                if let Value::Object(m) = &mut c {
                    m.remove(VARS_KEY);
                }
                stripped = c;
                &stripped
            }
        },
        PathRoot::Variables => context.get(VARS_KEY).unwrap_or(&Value::Null),
    };
    let found = path.query.query(root);
    if path.is_reference() {
        match found.at_most_one() {
            Ok(Some(v)) => Ok(v.clone()),
            Ok(None) => Err(DocError::new(
                Code::StatesRuntime,
                format!("path `{}` matched nothing in the input", path.text),
            )),
            Err(_) => Err(DocError::new(
                Code::StatesRuntime,
                format!("path `{}` matched more than one value", path.text),
            )),
        }
    } else {
        Ok(Value::Array(found.all().into_iter().cloned().collect()))
    }
}

/// Apply an input or output selection.
pub fn select(sel: &Selection, v: Value, context: &Value) -> DocResult<Value> {
    match sel {
        Selection::Whole => Ok(v),
        Selection::Empty => Ok(Value::Object(Map::new())),
        Selection::Path(p) => read(p, &v, context),
    }
}

/// Evaluate a computed value.
pub fn compute(e: &ValueExpr, input: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    match e {
        ValueExpr::Path(p) => read(p, input, scope.context),
        ValueExpr::Call(c) => intrinsics::call(c, input, scope),
        ValueExpr::Jsonata(j) => super::jsonata::eval(j, input, scope),
    }
}

/// Instantiate a payload template over `input`.
pub fn template(t: &Template, input: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    Ok(match t {
        Template::Literal(v) => v.clone(),
        Template::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| template(i, input, scope))
                .collect::<DocResult<_>>()?,
        ),
        Template::Object(entries) => {
            let mut m = Map::new();
            for (k, t) in entries {
                m.insert(k.clone(), template(t, input, scope)?);
            }
            Value::Object(m)
        }
        // A path that matches nothing is `States.Runtime`, as Step Functions names it.
        Template::Computed(e) => compute(e, input, scope)?,
    })
}

/// The effective input of a node: its input selection, then its parameters.
pub fn effective_input(df: &DataFlow, raw: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    let selected = select(&df.input, raw.clone(), scope.context)?;
    match &df.parameters {
        Some(t) => template(t, &selected, scope),
        None => Ok(selected),
    }
}

/// The document after a node produced `result` from its raw input `raw`:
/// the result selector, the result path, then the output selection.
pub fn finish(df: &DataFlow, raw: Value, result: Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    complete(df, raw, result, scope).map(|(out, _)| out)
}

/// [`finish`], and the variables the node assigns (`Assign`), both computed
/// with the variables as they were when the node was entered. A JSONata
/// node's `Output` and `Assign` see `$states.input` (`raw`) and
/// `$states.result`; a JSONPath node's `Assign` reads its result after the
/// result selector (`$`).
pub fn complete(
    df: &DataFlow,
    raw: Value,
    result: Value,
    scope: &mut Scope<'_>,
) -> DocResult<(Value, Option<Map<String, Value>>)> {
    if df.jsonata {
        scope.result = Some(result);
        let assigned = assign(df, &raw, scope);
        let out = match &df.output_template {
            Some(t) => template(t, &raw, scope),
            None => Ok(match scope.result.take() {
                Some(r) => place(&df.result_path, raw, r)?,
                None => raw,
            }),
        };
        scope.result = None;
        return Ok((out?, assigned?));
    }
    let result = match &df.result_selector {
        Some(t) => template(t, &result, scope)?,
        None => result,
    };
    let assigned = assign(df, &result, scope)?;
    let placed = place(&df.result_path, raw, result)?;
    Ok((select(&df.output, placed, scope.context)?, assigned))
}

/// The variables a node assigns, its `Assign` template over `over`.
pub fn assign(
    df: &DataFlow,
    over: &Value,
    scope: &mut Scope<'_>,
) -> DocResult<Option<Map<String, Value>>> {
    let Some(t) = &df.assign else {
        return Ok(None);
    };
    match template(t, over, scope)? {
        Value::Object(m) => Ok(Some(m)),
        other => Err(DocError::new(
            Code::StatesRuntime,
            format!(
                "`Assign` yielded {}, not an object of variables",
                kind(&other)
            ),
        )),
    }
}

/// Place `result` into `input` at the result path.
pub fn place(rp: &ResultPath, input: Value, result: Value) -> DocResult<Value> {
    match rp {
        ResultPath::Replace => Ok(result),
        ResultPath::Discard => Ok(input),
        ResultPath::At(path) => {
            let Some(steps) = &path.steps else {
                return Err(DocError::new(
                    Code::StatesResultPathMatchFailure,
                    format!("result path `{}` is not a reference path", path.text),
                ));
            };
            let mut doc = input;
            set(&mut doc, steps, result).map_err(|why| {
                DocError::new(
                    Code::StatesResultPathMatchFailure,
                    format!("result path `{}`: {why}", path.text),
                )
            })?;
            Ok(doc)
        }
    }
}

/// Write `value` at `steps`, creating objects for missing keys.
pub fn set(doc: &mut Value, steps: &[Step], value: Value) -> Result<(), String> {
    let Some((last, init)) = steps.split_last() else {
        *doc = value;
        return Ok(());
    };
    let mut cur = doc;
    for s in init {
        cur = match s {
            Step::Key(k) => {
                if cur.is_null() {
                    *cur = Value::Object(Map::new());
                }
                match cur {
                    Value::Object(m) => m.entry(k.clone()).or_insert(Value::Null),
                    other => return Err(format!("`{k}` is read from {}", kind(other))),
                }
            }
            Step::Index(i) => index_mut(cur, *i)?,
        };
    }
    match last {
        Step::Key(k) => {
            if cur.is_null() {
                *cur = Value::Object(Map::new());
            }
            match cur {
                Value::Object(m) => {
                    m.insert(k.clone(), value);
                    Ok(())
                }
                other => Err(format!("cannot set `{k}` in {}", kind(other))),
            }
        }
        Step::Index(i) => {
            *index_mut(cur, *i)? = value;
            Ok(())
        }
    }
}

fn index_mut(v: &mut Value, i: i64) -> Result<&mut Value, String> {
    match v {
        Value::Array(a) => {
            let len = a.len() as i64;
            let at = if i < 0 { len + i } else { i };
            usize::try_from(at)
                .ok()
                .and_then(|at| a.get_mut(at))
                .ok_or_else(|| format!("index {i} is out of bounds (length {len})"))
        }
        other => Err(format!("index {i} is read from {}", kind(other))),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_creates_objects_and_writes_indexes() {
        let mut v = json!({"a": [1, 2]});
        set(
            &mut v,
            &[Step::Key("b".into()), Step::Key("c".into())],
            json!(3),
        )
        .unwrap();
        set(&mut v, &[Step::Key("a".into()), Step::Index(-1)], json!(9)).unwrap();
        assert_eq!(v, json!({"a": [1, 9], "b": {"c": 3}}));
        assert!(set(
            &mut v,
            &[Step::Key("a".into()), Step::Key("x".into())],
            json!(0)
        )
        .is_err());
        assert!(set(&mut v, &[Step::Key("a".into()), Step::Index(5)], json!(0)).is_err());
    }

    #[test]
    fn draws_are_deterministic() {
        let mut a = Draws::new("i", 0.5, 1);
        let mut b = Draws::new("i", 0.5, 1);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(a.next_u64(), Draws::new("i", 0.25, 1).next_u64());
    }
}
