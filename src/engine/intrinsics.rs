//! The intrinsic functions of payload templates (`States.Format`, ...).
//! A bad argument raises `States.IntrinsicFailure`.

use super::document::{compute, kind, DocError, DocResult, Scope};
use crate::codes::Code;
use crate::model::{Arg, Call, Intrinsic, ValueExpr};
use base64::Engine as _;
use serde_json::{json, Value};

/// The longest array `States.ArrayRange` builds (Step Functions' limit).
pub const MAX_ITEMS: usize = 1000;

/// The longest string `States.Hash`, `States.Base64Encode` and
/// `States.Base64Decode` take (Step Functions' limit, in characters).
pub const MAX_INPUT_CHARS: usize = 10_000;

fn fail(f: Intrinsic, why: impl std::fmt::Display) -> DocError {
    DocError::new(Code::StatesIntrinsicFailure, format!("{}: {why}", f.name()))
}

fn arg_value(a: &Arg, input: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    match a {
        Arg::Literal(v) => Ok(v.clone()),
        Arg::Path(p) => compute(&ValueExpr::Path(p.clone()), input, scope),
        Arg::Call(c) => call(c, input, scope),
    }
}

fn int(f: Intrinsic, v: &Value, what: &str) -> DocResult<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|x| x.fract() == 0.0).map(|x| x as i64))
            .ok_or_else(|| fail(f, format!("{what} must be an integer, not {n}"))),
        other => Err(fail(
            f,
            format!("{what} must be an integer, not {}", kind(other)),
        )),
    }
}

/// `-0` reads as the integer 0, as Step Functions (Jackson) reads it
/// (serde_json reads it as the float -0.0).
fn negative_zero_is_zero(v: &mut Value) {
    match v {
        Value::Number(n)
            if n.as_i64().is_none()
                && n.as_f64().is_some_and(|x| x == 0.0 && x.is_sign_negative()) =>
        {
            *v = json!(0);
        }
        Value::Array(items) => items.iter_mut().for_each(negative_zero_is_zero),
        Value::Object(m) => m.values_mut().for_each(negative_zero_is_zero),
        _ => {}
    }
}

/// A number rounded to an integer as Step Functions (Java's `Math.round`)
/// does: half-way values go up (0.5 → 1, −2.5 → −2).
fn rounded(f: Intrinsic, v: &Value, what: &str) -> DocResult<i64> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Ok(i),
            None => n
                .as_f64()
                .map(|x| (x + 0.5).floor())
                .filter(|x| x.is_finite() && x.abs() < 9.0e18)
                .map(|x| x as i64)
                .ok_or_else(|| fail(f, format!("{what} is out of range: {n}"))),
        },
        other => Err(fail(
            f,
            format!("{what} must be a number, not {}", kind(other)),
        )),
    }
}

/// A string argument of at most [`MAX_INPUT_CHARS`] characters.
fn bounded(f: Intrinsic, v: &Value, what: &str) -> DocResult<String> {
    let s = string(f, v, what)?;
    let n = s.chars().count();
    if n > MAX_INPUT_CHARS {
        return Err(fail(
            f,
            format!("{what} has {n} characters, more than the {MAX_INPUT_CHARS} allowed"),
        ));
    }
    Ok(s)
}

/// JSON equality with numbers compared by value (1 and 1.0 are one value).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn string(f: Intrinsic, v: &Value, what: &str) -> DocResult<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(fail(
            f,
            format!("{what} must be a string, not {}", kind(other)),
        )),
    }
}

fn array(f: Intrinsic, v: &Value, what: &str) -> DocResult<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a.clone()),
        other => Err(fail(
            f,
            format!("{what} must be an array, not {}", kind(other)),
        )),
    }
}

/// The value of a call whose arguments are all constants (literals or such
/// calls, no path, no randomness), as it would be computed at run time;
/// `None` when it reads the document or draws a random number. The loader
/// uses it to refuse a call that can never succeed.
pub fn constant(c: &Call) -> Option<DocResult<Value>> {
    fn fixed(c: &Call) -> bool {
        let random = match c.function {
            Intrinsic::Uuid => true,
            Intrinsic::MathRandom => c.args.len() < 3,
            _ => false,
        };
        !random
            && c.args.iter().all(|a| match a {
                Arg::Literal(_) => true,
                Arg::Path(_) => false,
                Arg::Call(inner) => fixed(inner),
            })
    }
    if !fixed(c) {
        return None;
    }
    let context = Value::Null;
    let mut draws = super::document::Draws::new("", 0.0, 0);
    let mut scope = Scope::new(&context, &mut draws);
    Some(call(c, &Value::Null, &mut scope))
}

/// Call an intrinsic function.
pub fn call(c: &Call, input: &Value, scope: &mut Scope<'_>) -> DocResult<Value> {
    let f = c.function;
    let args: Vec<Value> = c
        .args
        .iter()
        .map(|a| arg_value(a, input, scope))
        .collect::<DocResult<_>>()?;
    let a = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
    Ok(match f {
        Intrinsic::Format => format(f, &args)?,
        Intrinsic::StringToJson => {
            let s = string(f, &a(0), "the argument")?;
            if s.trim().is_empty() {
                Value::Null
            } else {
                let mut v =
                    serde_json::from_str(&s).map_err(|e| fail(f, format!("not JSON: {e}")))?;
                negative_zero_is_zero(&mut v);
                v
            }
        }
        Intrinsic::JsonToString => Value::String(a(0).to_string()),
        Intrinsic::Array => Value::Array(args),
        Intrinsic::ArrayPartition => {
            let items = array(f, &a(0), "the first argument")?;
            let n = rounded(f, &a(1), "the chunk size")?;
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| fail(f, "the chunk size must be positive"))?;
            Value::Array(items.chunks(n).map(|c| Value::Array(c.to_vec())).collect())
        }
        Intrinsic::ArrayContains => {
            let items = array(f, &a(0), "the first argument")?;
            Value::Bool(items.contains(&a(1)))
        }
        Intrinsic::ArrayRange => {
            let (start, end, step) = (
                rounded(f, &a(0), "the start")?,
                rounded(f, &a(1), "the end")?,
                rounded(f, &a(2), "the step")?,
            );
            if step <= 0 {
                return Err(fail(f, "the step must be a positive integer"));
            }
            let mut out = Vec::new();
            let mut i = start;
            while i <= end {
                if out.len() == MAX_ITEMS {
                    return Err(fail(
                        f,
                        format!("the array would hold more than {MAX_ITEMS} items"),
                    ));
                }
                out.push(json!(i));
                i = match i.checked_add(step) {
                    Some(n) => n,
                    None => break,
                };
            }
            Value::Array(out)
        }
        Intrinsic::ArrayGetItem => {
            let items = array(f, &a(0), "the first argument")?;
            let i = int(f, &a(1), "the index")?;
            usize::try_from(i)
                .ok()
                .and_then(|i| items.get(i).cloned())
                .ok_or_else(|| fail(f, format!("index {i} is out of bounds")))?
        }
        Intrinsic::ArrayLength => json!(array(f, &a(0), "the argument")?.len()),
        Intrinsic::ArrayUnique => {
            let mut out: Vec<Value> = Vec::new();
            for v in array(f, &a(0), "the argument")? {
                if !out.iter().any(|o| same(o, &v)) {
                    out.push(v);
                }
            }
            Value::Array(out)
        }
        Intrinsic::Base64Encode => {
            let s = bounded(f, &a(0), "the argument")?;
            Value::String(base64::engine::general_purpose::STANDARD.encode(s))
        }
        Intrinsic::Base64Decode => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(bounded(f, &a(0), "the argument")?)
                .map_err(|e| fail(f, format!("not base64: {e}")))?;
            Value::String(
                String::from_utf8(bytes).map_err(|_| fail(f, "the decoded bytes are not UTF-8"))?,
            )
        }
        Intrinsic::Hash => {
            let data = bounded(f, &a(0), "the data")?;
            let alg = string(f, &a(1), "the algorithm")?;
            Value::String(hash(f, &alg, data.as_bytes())?)
        }
        Intrinsic::JsonMerge => {
            let (Value::Object(mut left), Value::Object(right)) = (a(0), a(1)) else {
                return Err(fail(f, "both values must be objects"));
            };
            match a(2) {
                Value::Bool(false) => {}
                Value::Bool(true) => {
                    return Err(fail(
                        f,
                        "only a shallow merge is supported: the third argument must be false",
                    ))
                }
                other => {
                    return Err(fail(
                        f,
                        format!("the third argument must be a boolean, not {}", kind(&other)),
                    ))
                }
            }
            left.extend(right);
            Value::Object(left)
        }
        Intrinsic::MathRandom => {
            let (start, end) = (
                rounded(f, &a(0), "the start")?,
                rounded(f, &a(1), "the end")?,
            );
            if end < start {
                return Err(fail(f, "the end must not be less than the start"));
            }
            let r = match args.get(2) {
                Some(seed) => {
                    let seed = rounded(f, seed, "the seed")?;
                    super::document::Draws::new("seed", 0.0, seed as u64).next_u64()
                }
                None => scope.draws.next_u64(),
            };
            // Both ends included, as Step Functions does.
            let span = (end as i128 - start as i128 + 1) as u128;
            json!((start as i128 + (u128::from(r) % span) as i128) as i64)
        }
        Intrinsic::MathAdd => {
            let (x, y) = (
                rounded(f, &a(0), "the first argument")?,
                rounded(f, &a(1), "the second argument")?,
            );
            json!(x
                .checked_add(y)
                .ok_or_else(|| fail(f, "the sum overflows"))?)
        }
        Intrinsic::StringSplit => {
            let s = string(f, &a(0), "the first argument")?;
            let delims = string(f, &a(1), "the delimiters")?;
            Value::Array(
                s.split(|c| delims.contains(c))
                    .filter(|p| !p.is_empty())
                    .map(|p| Value::String(p.to_string()))
                    .collect(),
            )
        }
        Intrinsic::Uuid => Value::String(uuid(scope.draws.bytes())),
    })
}

/// `States.Format`: each `{}` takes the next argument (strings as they are,
/// other values as JSON); `\{` and `\}` are literal braces.
fn format(f: Intrinsic, args: &[Value]) -> DocResult<Value> {
    let Some(Value::String(template)) = args.first() else {
        return Err(fail(f, "the first argument must be a string"));
    };
    let mut rest = args[1..].iter();
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some('{') | Some('}') | Some('\\')) => {
                out.extend(chars.next());
            }
            '{' if chars.peek() == Some(&'}') => {
                chars.next();
                match rest.next() {
                    Some(v) => render(v, &mut out),
                    None => return Err(fail(f, "more placeholders than arguments")),
                }
            }
            c => out.push(c),
        }
    }
    if rest.next().is_some() {
        return Err(fail(f, "more arguments than placeholders"));
    }
    Ok(Value::String(out))
}

/// How `States.Format` prints an argument, as Step Functions does: a string
/// as it is, an array as `[a, b]`, an object as `{k=v, k2=v2}` (members
/// printed the same way, strings unquoted), anything else as JSON.
pub fn render(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(k);
                out.push('=');
                render(item, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(super) fn hash(f: Intrinsic, alg: &str, data: &[u8]) -> DocResult<String> {
    use sha2::Digest;
    Ok(match alg {
        "MD5" => hex::encode(md5::Md5::digest(data)),
        "SHA-1" => hex::encode(sha1::Sha1::digest(data)),
        "SHA-256" => hex::encode(sha2::Sha256::digest(data)),
        "SHA-384" => hex::encode(sha2::Sha384::digest(data)),
        "SHA-512" => hex::encode(sha2::Sha512::digest(data)),
        other => {
            return Err(fail(
                f,
                format!("unknown algorithm {other:?} (MD5, SHA-1, SHA-256, SHA-384, SHA-512)"),
            ))
        }
    })
}

/// A version-4 UUID from 16 random bytes.
pub(super) fn uuid(b: [u8; 32]) -> String {
    let mut u = [0u8; 16];
    u.copy_from_slice(&b[..16]);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    let h = hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(function: Intrinsic, args: Vec<Value>) -> DocResult<Value> {
        let c = Call {
            function,
            args: args.into_iter().map(Arg::Literal).collect(),
        };
        constant(&c).expect("constant")
    }

    #[test]
    fn math_add_rounds_each_argument_as_step_functions_does() {
        let add = |a: Value, b: Value| of(Intrinsic::MathAdd, vec![a, b]).unwrap();
        assert_eq!(add(json!(0.5), json!(0)), json!(1));
        assert_eq!(add(json!(1.49), json!(1.5)), json!(3));
        assert_eq!(add(json!(-2.5), json!(0)), json!(-2));
        assert_eq!(add(json!(111), json!(-1)), json!(110));
        assert!(of(Intrinsic::MathAdd, vec![json!("a"), json!(1)]).is_err());
    }

    #[test]
    fn format_prints_objects_and_arrays_as_step_functions_does() {
        let v = of(
            Intrinsic::Format,
            vec![
                json!("{} {} {} {}"),
                json!({"Arg1": 1, "Arg2": []}),
                json!(["a", 2]),
                Value::Null,
                json!("s"),
            ],
        )
        .unwrap();
        assert_eq!(v, json!("{Arg1=1, Arg2=[]} [a, 2] null s"));
    }

    #[test]
    fn string_to_json_of_blank_is_null_and_ranges_are_bounded() {
        assert_eq!(
            of(Intrinsic::StringToJson, vec![json!("")]).unwrap(),
            Value::Null
        );
        assert_eq!(
            of(Intrinsic::StringToJson, vec![json!("-0")]).unwrap(),
            json!(0)
        );
        let range =
            |a: i64, b: i64, s: i64| of(Intrinsic::ArrayRange, vec![json!(a), json!(b), json!(s)]);
        assert_eq!(range(0, 10, 3).unwrap(), json!([0, 3, 6, 9]));
        assert!(range(1, 1000, 1).is_ok());
        assert!(range(1, 1001, 1).is_err());
        assert!(range(5, 1, -1).is_err());
        assert_eq!(
            of(Intrinsic::ArrayUnique, vec![json!([1, 1.0, "1", 2])]).unwrap(),
            json!([1, "1", 2])
        );
        assert!(of(
            Intrinsic::JsonMerge,
            vec![json!({}), json!({}), json!(true)]
        )
        .is_err());
        assert!(of(Intrinsic::Hash, vec![json!("x"), json!("CRC32")]).is_err());
        let long = "x".repeat(MAX_INPUT_CHARS + 1);
        assert!(of(Intrinsic::Base64Encode, vec![json!(long)]).is_err());
    }
}
