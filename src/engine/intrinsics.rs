//! The intrinsic functions of payload templates (`States.Format`, ...).
//! A bad argument raises `States.IntrinsicFailure`.

use super::document::{compute, kind, DocError, DocResult, Scope};
use crate::codes::Code;
use crate::model::{Arg, Call, Intrinsic, ValueExpr};
use base64::Engine as _;
use serde_json::{json, Value};

/// The longest array `States.ArrayRange` builds.
const MAX_RANGE: usize = 1000;

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
            serde_json::from_str(&s).map_err(|e| fail(f, format!("not JSON: {e}")))?
        }
        Intrinsic::JsonToString => Value::String(a(0).to_string()),
        Intrinsic::Array => Value::Array(args),
        Intrinsic::ArrayPartition => {
            let items = array(f, &a(0), "the first argument")?;
            let n = int(f, &a(1), "the chunk size")?;
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
                int(f, &a(0), "the start")?,
                int(f, &a(1), "the end")?,
                int(f, &a(2), "the step")?,
            );
            if step == 0 {
                return Err(fail(f, "the step must not be 0"));
            }
            let mut out = Vec::new();
            let mut i = start;
            while (step > 0 && i <= end) || (step < 0 && i >= end) {
                if out.len() == MAX_RANGE {
                    return Err(fail(f, format!("more than {MAX_RANGE} items")));
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
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            Value::Array(out)
        }
        Intrinsic::Base64Encode => Value::String(
            base64::engine::general_purpose::STANDARD.encode(string(f, &a(0), "the argument")?),
        ),
        Intrinsic::Base64Decode => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(string(f, &a(0), "the argument")?)
                .map_err(|e| fail(f, format!("not base64: {e}")))?;
            Value::String(
                String::from_utf8(bytes).map_err(|_| fail(f, "the decoded bytes are not UTF-8"))?,
            )
        }
        Intrinsic::Hash => {
            let data = match a(0) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let alg = string(f, &a(1), "the algorithm")?;
            Value::String(hash(f, &alg, data.as_bytes())?)
        }
        Intrinsic::JsonMerge => {
            let (Value::Object(mut left), Value::Object(right)) = (a(0), a(1)) else {
                return Err(fail(f, "both values must be objects"));
            };
            if a(2) != Value::Bool(false) {
                return Err(fail(f, "only a shallow merge (false) is supported"));
            }
            left.extend(right);
            Value::Object(left)
        }
        Intrinsic::MathRandom => {
            let (start, end) = (int(f, &a(0), "the start")?, int(f, &a(1), "the end")?);
            if end <= start {
                return Err(fail(f, "the end must be greater than the start"));
            }
            let r = match args.get(2) {
                Some(seed) => {
                    let seed = int(f, seed, "the seed")?;
                    super::document::Draws::new("seed", 0.0, seed as u64).next_u64()
                }
                None => scope.draws.next_u64(),
            };
            let span = (end as i128 - start as i128) as u128;
            json!((start as i128 + (u128::from(r) % span) as i128) as i64)
        }
        Intrinsic::MathAdd => {
            let (x, y) = (a(0), a(1));
            match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => json!(x
                    .checked_add(y)
                    .ok_or_else(|| fail(f, "the sum overflows"))?),
                _ => match (x.as_f64(), y.as_f64()) {
                    (Some(x), Some(y)) => json!(x + y),
                    _ => return Err(fail(f, "both arguments must be numbers")),
                },
            }
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
                    Some(Value::String(s)) => out.push_str(s),
                    Some(v) => out.push_str(&v.to_string()),
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

fn hash(f: Intrinsic, alg: &str, data: &[u8]) -> DocResult<String> {
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
fn uuid(b: [u8; 32]) -> String {
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
