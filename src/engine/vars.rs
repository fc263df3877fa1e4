//! Process variables: reading a task's input and merging its output.
//!
//! Paths are the dotted JSONPath subset `$`, `$.a`, `$.a.b` (every dialect's
//! `inputPath`/`resultPath` that names a place, not a query).
//!
//! Merge rule (documented in the README): with no result path, an object
//! output's keys are merged into the variables at top level; any other output
//! (a number, a string, an array) is stored under the task's node id; `null`
//! changes nothing.

use serde_json::{Map, Value};

use crate::model::var_path_segments as segments;

/// The value at `path` in the variables (`$` = all of them as one object).
pub fn get(vars: &Map<String, Value>, path: &str) -> Result<Value, String> {
    let segs = segments(path)?;
    let mut cur: Option<&Value> = None;
    for (i, s) in segs.iter().enumerate() {
        let next = if i == 0 {
            vars.get(*s)
        } else {
            cur.and_then(|v| v.get(*s))
        };
        match next {
            Some(v) => cur = Some(v),
            None => return Err(format!("path `{path}` does not resolve: no `{s}`")),
        }
    }
    Ok(match cur {
        Some(v) => v.clone(),
        None => Value::Object(vars.clone()),
    })
}

/// Place `value` at `path`, creating objects on the way. `$` replaces all
/// variables (the value must then be an object).
pub fn set(vars: &mut Map<String, Value>, path: &str, value: Value) -> Result<(), String> {
    let segs = segments(path)?;
    let Some((last, init)) = segs.split_last() else {
        return match value {
            Value::Object(m) => {
                *vars = m;
                Ok(())
            }
            other => Err(format!(
                "cannot replace all variables with non-object {other}"
            )),
        };
    };
    let mut cur = vars;
    for s in init {
        let entry = cur
            .entry((*s).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        cur = match entry {
            Value::Object(m) => m,
            _ => return Err(format!("path `{path}`: `{s}` is not an object")),
        };
    }
    cur.insert((*last).to_string(), value);
    Ok(())
}

/// Merge a task's output into the variables (see the module doc).
pub fn merge_output(
    vars: &mut Map<String, Value>,
    node_id: &str,
    result_path: Option<&str>,
    output: Value,
) -> Result<(), String> {
    if let Some(path) = result_path {
        return set(vars, path, output);
    }
    match output {
        Value::Object(m) => {
            vars.extend(m);
            Ok(())
        }
        Value::Null => Ok(()),
        other => {
            vars.insert(node_id.to_string(), other);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn get_and_set_dotted_paths() {
        let mut v = obj(json!({"a": {"b": 1}}));
        assert_eq!(get(&v, "$.a.b").unwrap(), json!(1));
        assert_eq!(get(&v, "$").unwrap(), json!({"a": {"b": 1}}));
        assert!(get(&v, "$.x").is_err());
        set(&mut v, "$.c.d", json!(2)).unwrap();
        assert_eq!(
            Value::Object(v.clone()),
            json!({"a": {"b": 1}, "c": {"d": 2}})
        );
        assert!(set(&mut v, "a.b", json!(1)).is_err());
        assert!(set(&mut v, "$.a[0]", json!(1)).is_err());
    }

    #[test]
    fn merge_rules() {
        let mut v = obj(json!({"x": 1}));
        merge_output(&mut v, "T", None, json!({"y": 2})).unwrap();
        merge_output(&mut v, "T", None, json!(7)).unwrap();
        merge_output(&mut v, "U", None, Value::Null).unwrap();
        merge_output(&mut v, "V", Some("$.r"), json!([1])).unwrap();
        assert_eq!(Value::Object(v), json!({"x": 1, "y": 2, "T": 7, "r": [1]}));
    }
}
