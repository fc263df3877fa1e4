//! Idempotent starts: a start with an `Idempotency-Key` the tenant used
//! before replays the instance that key started — if it is the same
//! request. The request's fingerprint is stored beside the key
//! (`instances.idempotency_fingerprint`); a reuse with another process,
//! start event or variables is refused with
//! `SUTRA.RUNTIME.IDEMPOTENCY_KEY_REUSED` (422 over HTTP), never answered
//! with the first request's instance.
//!
//! Invariants:
//! - the fingerprint is a function of what was asked, not of how it was
//!   spelled: object keys are hashed in sorted order, so `{"a":1,"b":2}`
//!   and `{"b":2,"a":1}` are the same request;
//! - a key whose instance has no fingerprint (started before fingerprints
//!   were kept) replays as it always did;
//! - the check runs wherever a key is looked up: before a start runs, and
//!   again when the store answers that a concurrent start took the key first.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::store::{KeyHolder, Store};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The fingerprint of a start: sha256 (hex) over the process id, the start
/// event (none: the none start) and the variables in canonical form.
pub fn fingerprint(
    process_id: &str,
    start_node: Option<&str>,
    variables: &Map<String, Value>,
) -> String {
    let mut h = Sha256::new();
    h.update(b"sutra.start.v1\0");
    h.update(process_id.as_bytes());
    h.update(b"\0");
    h.update(start_node.unwrap_or_default().as_bytes());
    h.update(b"\0");
    let mut text = String::new();
    canonical_object(variables, &mut text);
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

/// JSON text with every object's keys sorted (scalars as serde_json writes them).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => canonical_object(m, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn canonical_object(m: &Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        canonical(&m[k], out);
    }
    out.push('}');
}

impl<S: Store> Runtime<S> {
    /// The instance an earlier start with `key` made, if any, when that start
    /// asked for the same thing (`fingerprint`); `IDEMPOTENCY_KEY_REUSED` when
    /// it asked for something else.
    pub async fn replayed(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
    ) -> RuntimeResult<Option<String>> {
        Ok(self
            .replayed_holder(tenant, key, fingerprint)
            .await?
            .map(|h| h.id))
    }

    /// [`Self::replayed`] with what holds the key: the live instance, or the
    /// key kept for an instance deleted at its end (`KeyHolder::ended`).
    pub async fn replayed_holder(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
    ) -> RuntimeResult<Option<KeyHolder>> {
        let now = self.inner.clock.now().timestamp_millis();
        let Some(holder) = self.inner.store.instance_by_key(tenant, key, now).await? else {
            return Ok(None);
        };
        match &holder.fingerprint {
            Some(f) if f != fingerprint => Err(RuntimeError::new(
                Code::IdempotencyKeyReused,
                format!(
                    "Idempotency-Key `{key}` was used for another request (instance {}): a key \
                     replays only the request it first came with (the same process and \
                     variables); use a new key for a new request",
                    holder.id
                ),
            )),
            _ => Ok(Some(holder)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn key_order_does_not_change_the_fingerprint() {
        let a = vars(json!({"a": 1, "b": {"x": [1, {"q": 2, "p": 3}], "y": null}}));
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"b": {"y": null, "x": [1, {"p": 3, "q": 2}]}, "a": 1}"#)
                .unwrap();
        assert_eq!(fingerprint("p", None, &a), fingerprint("p", None, &b));
    }

    #[test]
    fn process_start_event_and_variables_each_count() {
        let v = vars(json!({"amount": 10}));
        let base = fingerprint("simple", None, &v);
        assert_ne!(base, fingerprint("waiter", None, &v));
        assert_ne!(base, fingerprint("simple", Some("msgStart"), &v));
        assert_ne!(
            base,
            fingerprint("simple", None, &vars(json!({"amount": 11})))
        );
        assert_ne!(
            base,
            fingerprint("simple", None, &vars(json!({"amount": "10"})))
        );
        // No ambiguity between the fields: the separator is not a valid id byte.
        assert_ne!(
            fingerprint("ab", Some("c"), &Map::new()),
            fingerprint("a", Some("bc"), &Map::new())
        );
    }
}
