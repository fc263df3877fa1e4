//! The HX `http` node (issue 31): a task whose implementation is an HTTP
//! call the host makes, with the attributes of BPMN's `q:http`.
//!
//! ```xml
//! <node id="charge" type="http" method="POST" connection="shop" path="/charges"
//!       body="order" result="charge">
//!   <header name="X-Team" value="payments"/>
//!   <retry maxAttempts="3" retryOn="transient,rate_limit"/>
//! </node>
//! ```
//!
//! `method` (default GET), `url` (absolute) or `connection` + `path`,
//! `body` (a variable name or `$.a.b`), `result` (the variable taking
//! `{StatusCode, StatusText, Headers, ResponseBody}`; none: merged like any
//! task's output), `<header>` children. A failed call's code is one of
//! `Api.*`, `Credential.*`, `Mapper.Failure`, with its error class
//! (`retryOn` sees it; an error edge's `error.code` names it).

use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::dialect::xml::{Element, Ns};
use crate::model::{HttpSpec, TaskImpl, HTTP_METHODS};

fn diag(el: &Element, message: String) -> Diagnostic {
    Diagnostic::error(Code::HxInvalidAttribute, message)
        .at(el.pos)
        .element(el.label().to_string())
}

/// The implementation of an `http` node, its attributes checked.
pub(super) fn spec(el: &Element, what: &str, out: &mut Vec<Diagnostic>) -> TaskImpl {
    let attr = |k: &str| {
        el.attr(k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let method = attr("method")
        .unwrap_or_else(|| "GET".into())
        .to_ascii_uppercase();
    if !HTTP_METHODS.contains(&method.as_str()) {
        out.push(diag(
            el,
            format!(
                "{what}: method `{method}` is not one of {}",
                HTTP_METHODS.join(", ")
            ),
        ));
    }
    let (url, connection, path) = (attr("url"), attr("connection"), attr("path"));
    match (&url, &connection, &path) {
        (Some(u), None, None) => {
            if !url::Url::parse(u).is_ok_and(|p| matches!(p.scheme(), "http" | "https")) {
                out.push(diag(
                    el,
                    format!("{what}: url `{u}` is not an absolute http(s) URL"),
                ));
            }
        }
        (None, Some(_), p) => {
            if let Some(p) = p.as_deref().filter(|p| url::Url::parse(p).is_ok()) {
                out.push(diag(el, format!("{what}: path `{p}` must be relative")));
            }
        }
        (None, None, _) => out.push(diag(el, format!("{what} needs `url` or `connection`"))),
        _ => out.push(diag(
            el,
            format!(
                "{what} has `url` and `connection`/`path`: give a url, or a connection and a path"
            ),
        )),
    }
    for v in ["body", "result"] {
        if let Some(b) = attr(v).filter(|b| b.starts_with('$')) {
            if let Err(m) = crate::model::var_path_segments(&b) {
                out.push(diag(el, format!("{what}: `{v}`: {m}")));
            }
        }
    }
    let mut headers = Vec::new();
    for c in el
        .children
        .iter()
        .filter(|c| c.ns == el.ns && c.local == "header")
    {
        for a in &c.attrs {
            if !(a.ns == Ns::None && matches!(a.local.as_str(), "name" | "value")) {
                out.push(
                    Diagnostic::error(
                        Code::HxUnknownAttribute,
                        format!(
                            "`{}` is not an attribute of `<header>` (allowed: name, value)",
                            a.qname
                        ),
                    )
                    .at(c.pos)
                    .element(el.label().to_string()),
                );
            }
        }
        match (c.attr("name"), c.attr("value")) {
            (Some(n), Some(v))
                if http::HeaderName::from_bytes(n.trim().as_bytes()).is_ok()
                    && http::HeaderValue::from_str(v).is_ok() =>
            {
                headers.push((n.trim().to_string(), v.to_string()))
            }
            _ => out.push(diag(
                c,
                format!("{what}: `<header>` needs a valid `name` and `value`"),
            )),
        }
    }
    TaskImpl::Http(Box::new(HttpSpec {
        from_input: false,
        method,
        url: url.or(path),
        connection,
        headers,
        body_variable: attr("body"),
    }))
}

/// Where an `http` node's result goes (`result`: a name or `$.a.b`).
pub(super) fn result_path(el: &Element) -> Option<String> {
    let r = el.attr("result").map(str::trim).filter(|v| !v.is_empty())?;
    Some(if r.starts_with('$') {
        r.to_string()
    } else {
        format!("$.{r}")
    })
}
