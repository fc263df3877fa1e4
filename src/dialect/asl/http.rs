//! The HTTP Task (issue 31): a `Task` whose `Resource` is `sutra:http` or
//! Step Functions' `arn:aws:states:::http:invoke`. Its `Parameters` (or
//! JSONata `Arguments`) build the request (`model::http`); what is written
//! literally is checked here, with `SUTRA.CONFIG.STATES.HTTP_TASK` and the
//! field's line:column; what is computed (`"ApiEndpoint.$"`, `{% ... %}`)
//! is checked by the runtime when the attempt builds it (`Mapper.Failure`).

use super::json::J;
use super::states::St;
use crate::codes::Code;
use crate::model::{connection_of, HttpSpec, TaskImpl, HTTP_METHODS, REQUEST_FIELDS};

/// The `Resource`s of an HTTP task.
pub(super) const RESOURCES: &[&str] = &["sutra:http", "arn:aws:states:::http:invoke"];

pub(super) fn is_http(resource: &str) -> bool {
    RESOURCES.contains(&resource)
}

const ENCODINGS: &[&str] = &["NONE", "URL_ENCODED"];
const ARRAY_FORMATS: &[&str] = &["INDICES", "REPEAT", "COMMAS", "BRACKETS"];

impl St<'_, '_, '_> {
    fn http_err(&mut self, pos: crate::diag::Pos, message: String) {
        self.err(Code::StatesHttpTaskInvalid, pos, message);
    }

    /// The implementation of an HTTP task, its literal request fields checked.
    pub(super) fn http_task(&mut self) -> TaskImpl {
        let implementation = TaskImpl::Http(Box::new(HttpSpec {
            from_input: true,
            method: String::new(),
            url: None,
            connection: None,
            headers: Vec::new(),
            body_variable: None,
        }));
        let field = if self.jsonata {
            "Arguments"
        } else {
            "Parameters"
        };
        let Some(p) = self.get(field).cloned() else {
            self.http_err(
                self.j.pos,
                format!("an HTTP task needs `{field}` with `ApiEndpoint` and `Method`"),
            );
            return implementation;
        };
        let Some(obj) = p.as_obj() else {
            // A whole computed request (`"Arguments": "{% ... %}"`) is checked when built.
            if !(self.jsonata && p.as_str().is_some_and(super::jsonata::is_expression)) {
                self.http_err(
                    p.pos,
                    format!("`{field}` of an HTTP task must be an object"),
                );
            }
            return implementation;
        };
        let mut seen = Vec::new();
        for (k, v) in obj {
            let dynamic_key = k.name.ends_with(".$");
            let name = k.name.strip_suffix(".$").unwrap_or(&k.name).to_string();
            if !REQUEST_FIELDS.contains(&name.as_str()) {
                self.http_err(
                    k.pos,
                    format!(
                        "an HTTP task's `{field}` has no field `{name}` (one of {})",
                        REQUEST_FIELDS.join(", ")
                    ),
                );
                continue;
            }
            seen.push(name.clone());
            let computed = dynamic_key
                || (self.jsonata && v.as_str().is_some_and(super::jsonata::is_expression));
            if !computed {
                self.http_field(&name, v);
            }
        }
        for required in ["ApiEndpoint", "Method"] {
            if !seen.iter().any(|s| s == required) {
                self.http_err(
                    p.pos,
                    format!("an HTTP task's `{field}` needs `{required}`"),
                );
            }
        }
        implementation
    }

    fn http_field(&mut self, name: &str, v: &J) {
        match name {
            "Method" => match v.as_str() {
                Some(m) if HTTP_METHODS.contains(&m) => {}
                _ => self.http_err(
                    v.pos,
                    format!("`Method` must be one of {}", HTTP_METHODS.join(", ")),
                ),
            },
            "ApiEndpoint" => match v.as_str() {
                Some(u) if !u.is_empty() => match url::Url::parse(u) {
                    Ok(url) if !matches!(url.scheme(), "http" | "https") => {
                        self.http_err(v.pos, format!("`ApiEndpoint` `{u}` is not http(s)"))
                    }
                    Ok(_) | Err(url::ParseError::RelativeUrlWithoutBase) => {}
                    Err(e) => self.http_err(v.pos, format!("`ApiEndpoint` `{u}`: {e}")),
                },
                _ => self.http_err(v.pos, "`ApiEndpoint` must be a non-empty string".into()),
            },
            "Headers" | "QueryParameters" if v.as_obj().is_none() => {
                self.http_err(v.pos, format!("`{name}` must be an object"));
            }
            "Transform" => self.http_transform(v),
            "Authentication" => {
                if let Err(m) = connection_of(&v.to_value()) {
                    self.http_err(v.pos, m);
                }
            }
            _ => {}
        }
    }

    fn http_transform(&mut self, v: &J) {
        let Some(obj) = v.as_obj() else {
            self.http_err(v.pos, "`Transform` must be an object".into());
            return;
        };
        for (k, x) in obj {
            match k.name.as_str() {
                "RequestBodyEncoding" => {
                    if !x.as_str().is_some_and(|s| ENCODINGS.contains(&s)) {
                        self.http_err(
                            x.pos,
                            format!("`RequestBodyEncoding` is one of {}", ENCODINGS.join(", ")),
                        );
                    }
                }
                "RequestEncodingOptions" => {
                    let ok = x.as_obj().is_some_and(|o| {
                        o.iter().all(|(k, f)| {
                            k.name == "ArrayFormat"
                                && f.as_str().is_some_and(|s| ARRAY_FORMATS.contains(&s))
                        })
                    });
                    if !ok {
                        self.http_err(
                            x.pos,
                            format!(
                                "`RequestEncodingOptions` is {{\"ArrayFormat\": {}}}",
                                ARRAY_FORMATS.join(" | ")
                            ),
                        );
                    }
                }
                other => self.http_err(
                    k.pos,
                    format!(
                        "`Transform` has no field `{other}` (RequestBodyEncoding, RequestEncodingOptions)"
                    ),
                ),
            }
        }
    }
}
