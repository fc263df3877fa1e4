//! A task whose implementation is an HTTP call the host makes (issue 31):
//! the States language's HTTP Task, BPMN's `q:http`, HX's `http` node.
//!
//! The engine treats it as any task (retries, catches, timeouts): its
//! attempt goes out with the reserved module name [`HTTP_TASK`], and the
//! runtime (`runtime::http_task`) makes the call. One request shape for the
//! three dialects, the States language's (`ApiEndpoint`, `Method`,
//! `Headers`, `QueryParameters`, `RequestBody`, `Transform`,
//! `Authentication`): the States language builds it from the task's
//! `Parameters`/`Arguments` (the task's input *is* the request); BPMN and HX
//! fix it in the definition, the body read from a variable
//! ([`HttpSpec::request`]).
//!
//! Invariant: a loaded `HttpSpec` names a method of [`HTTP_METHODS`] and,
//! unless the request comes from the input, an endpoint or a connection.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// The module name an HTTP task's attempts carry, and the egress grant's
/// module name that allows them (`PUT /v1/egress/sutra:http`).
pub const HTTP_TASK: &str = "sutra:http";

/// The methods an HTTP task may use.
pub const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

/// The fields of the request document (the States language's `Parameters`).
pub const REQUEST_FIELDS: &[&str] = &[
    "ApiEndpoint",
    "Method",
    "Headers",
    "QueryParameters",
    "RequestBody",
    "Transform",
    "Authentication",
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpSpec {
    /// `true`: the task's input is the request document (the States
    /// language); the fields below are then unused.
    pub from_input: bool,
    pub method: String,
    /// An absolute URL, or a path under the connection's endpoint base.
    pub url: Option<String>,
    /// A connection of the tenant (`/v1/connections/{name}`).
    pub connection: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The variable (a name or a `$.a.b` path) whose value is the body.
    pub body_variable: Option<String>,
}

impl HttpSpec {
    /// The request document of an attempt whose input is `input`.
    pub fn request(&self, input: &Value) -> Value {
        if self.from_input {
            return input.clone();
        }
        let mut r = Map::new();
        r.insert("Method".into(), json!(self.method));
        if let Some(u) = &self.url {
            r.insert("ApiEndpoint".into(), json!(u));
        }
        if !self.headers.is_empty() {
            let h: Map<String, Value> = self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            r.insert("Headers".into(), Value::Object(h));
        }
        if let Some(c) = &self.connection {
            r.insert("Authentication".into(), json!({ "ConnectionName": c }));
        }
        if let Some(var) = &self.body_variable {
            let path: Vec<&str> = match super::var_path_segments(var) {
                Ok(segs) => segs,
                Err(_) => vec![var.as_str()],
            };
            let mut at = Some(input);
            for seg in path {
                at = at.and_then(|v| v.get(seg));
            }
            if let Some(body) = at {
                r.insert("RequestBody".into(), body.clone());
            }
        }
        Value::Object(r)
    }
}

/// The connection name of an `Authentication` object: `ConnectionName`, or
/// the NAME of an EventBridge `ConnectionArn`
/// (`arn:aws:events:REGION:ACCOUNT:connection/NAME/UUID`).
pub fn connection_of(auth: &Value) -> Result<String, String> {
    let Some(obj) = auth.as_object() else {
        return Err("Authentication must be an object".into());
    };
    for k in obj.keys() {
        if k != "ConnectionArn" && k != "ConnectionName" {
            return Err(format!(
                "Authentication has no field `{k}` (ConnectionArn or ConnectionName)"
            ));
        }
    }
    if let Some(name) = obj.get("ConnectionName") {
        return name
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| "ConnectionName must be a non-empty string".into());
    }
    let Some(arn) = obj.get("ConnectionArn").and_then(Value::as_str) else {
        return Err("Authentication names no connection (ConnectionArn or ConnectionName)".into());
    };
    let name = arn
        .strip_prefix("arn:")
        .and_then(|r| r.split(':').nth(4))
        .and_then(|res| res.strip_prefix("connection/"))
        .and_then(|r| r.split('/').next())
        .filter(|n| !n.is_empty());
    name.map(str::to_string).ok_or_else(|| {
        format!("ConnectionArn `{arn}` is not arn:aws:events:REGION:ACCOUNT:connection/NAME/ID")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_arn_names_its_connection() {
        let arn = json!({"ConnectionArn": "arn:aws:events:us-east-1:123456789012:connection/stripe/5f1c-aa"});
        assert_eq!(connection_of(&arn).unwrap(), "stripe");
        assert_eq!(
            connection_of(&json!({"ConnectionName": "crm"})).unwrap(),
            "crm"
        );
        assert!(connection_of(&json!({"ConnectionArn": "arn:aws:events:x"})).is_err());
        assert!(connection_of(&json!({"Other": 1})).is_err());
    }

    #[test]
    fn a_fixed_spec_builds_the_request_with_the_body_variable() {
        let spec = HttpSpec {
            from_input: false,
            method: "POST".into(),
            url: Some("/orders".into()),
            connection: Some("shop".into()),
            headers: vec![("X-A".into(), "1".into())],
            body_variable: Some("$.order.item".into()),
        };
        let r = spec.request(&json!({"order": {"item": {"sku": 7}}}));
        assert_eq!(
            r,
            json!({"Method": "POST", "ApiEndpoint": "/orders", "Headers": {"X-A": "1"},
                   "Authentication": {"ConnectionName": "shop"}, "RequestBody": {"sku": 7}})
        );
    }
}
