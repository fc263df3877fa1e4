//! `q:http` (issue 31): a BPMN service task whose implementation is an HTTP
//! call the host makes.
//!
//! ```xml
//! <bpmn:serviceTask id="charge" implementation="http">
//!   <bpmn:extensionElements>
//!     <q:http method="POST" connection="shop" path="/charges" body="order"/>
//!     <q:io resultPath="$.charge"/>
//!   </bpmn:extensionElements>
//! </bpmn:serviceTask>
//! ```
//!
//! Attributes: `method` (default GET), `url` (absolute) or `connection` +
//! `path` (joined to the connection's endpoint base), `body` (a variable
//! name or a `$.a.b` path whose value is the request body); `q:header
//! name=".." value=".."` children. The result `{StatusCode, StatusText,
//! Headers, ResponseBody}` goes where `q:io` says (`resultPath`).
//!
//! Errors: a failed call fails the attempt with its `Api.*`, `Credential.*`
//! or `Mapper.Failure` code (`q:retry` applies); once no retry is left, an
//! error boundary of the task whose `errorRef` names that code (or one
//! without `errorRef`) catches it: [`route_failures`] sets the boundaries
//! of HTTP tasks to catch spent failures, not business errors alone.

use super::ext::describe;
use super::xml::{Element, Ns};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::{
    BoundaryEvent, BoundaryTrigger, HttpSpec, NodeKind, Process, TaskImpl, HTTP_METHODS,
};

const ATTRS: &[&str] = &["method", "url", "connection", "path", "body"];

fn invalid(q: &Element, host: &Element, message: String) -> Diagnostic {
    Diagnostic::error(Code::BpmnInvalidAttribute, message)
        .at(q.pos)
        .element(host.label())
}

/// The `q:http` of a service task, if it has one.
pub fn element(el: &Element) -> Option<&Element> {
    super::ext::q_elements(el)
        .into_iter()
        .find(|q| q.local == "http")
}

/// The HTTP task a `q:http` describes (its problems reported).
pub fn spec(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> TaskImpl {
    for a in &q.attrs {
        if a.ns == Ns::None && ATTRS.contains(&a.local.as_str()) {
            continue;
        }
        if matches!(a.ns, Ns::Xsi | Ns::Xml) {
            continue;
        }
        diags.push(invalid(
            q,
            host,
            format!(
                "unknown attribute `{}` on q:http of {} (expected one of: {})",
                a.qname,
                describe(host),
                ATTRS.join(", ")
            ),
        ));
    }
    if let Some(v) = host.attr("implementation").map(str::trim) {
        if v != "http" {
            diags.push(invalid(
                q,
                host,
                format!(
                    "{} has q:http and implementation=\"{v}\": an HTTP task's implementation is \"http\" (or none)",
                    describe(host)
                ),
            ));
        }
    }
    let method = q
        .attr("method")
        .map_or("GET", str::trim)
        .to_ascii_uppercase();
    if !HTTP_METHODS.contains(&method.as_str()) {
        diags.push(invalid(
            q,
            host,
            format!(
                "q:http method `{method}` is not one of {}",
                HTTP_METHODS.join(", ")
            ),
        ));
    }
    let attr = |k: &str| {
        q.attr(k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let (url, connection, path) = (attr("url"), attr("connection"), attr("path"));
    match (&url, &connection, &path) {
        (Some(u), None, None) => match url::Url::parse(u) {
            Ok(p) if matches!(p.scheme(), "http" | "https") => {}
            _ => diags.push(invalid(
                q,
                host,
                format!("q:http url `{u}` is not an absolute http(s) URL"),
            )),
        },
        (None, Some(_), _) => {}
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => diags.push(invalid(
            q,
            host,
            format!(
                "q:http on {} has `url` and `connection`/`path`: give a url, or a connection and a path",
                describe(host)
            ),
        )),
        (None, None, _) => diags.push(invalid(
            q,
            host,
            format!("q:http on {} needs `url` or `connection`", describe(host)),
        )),
    }
    if let Some(b) = &path
        .as_ref()
        .or(url.as_ref())
        .filter(|_| connection.is_some())
    {
        if url::Url::parse(b).is_ok() {
            diags.push(invalid(
                q,
                host,
                format!("q:http path `{b}` must be relative"),
            ));
        }
    }
    let body = attr("body");
    if let Some(b) = body.as_deref().filter(|b| b.starts_with('$')) {
        if let Err(m) = crate::model::var_path_segments(b) {
            diags.push(invalid(q, host, format!("q:http body: {m}")));
        }
    }
    let mut headers = Vec::new();
    for c in &q.children {
        if c.ns != Ns::Q || c.local != "header" {
            diags.push(
                Diagnostic::error(
                    Code::BpmnUnsupportedElement,
                    format!("q:http holds q:header elements only, not `{}`", c.qname),
                )
                .at(c.pos)
                .element(host.label()),
            );
            continue;
        }
        match (c.attr("name"), c.attr("value")) {
            (Some(n), Some(v))
                if http::HeaderName::from_bytes(n.trim().as_bytes()).is_ok()
                    && http::HeaderValue::from_str(v).is_ok() =>
            {
                headers.push((n.trim().to_string(), v.to_string()))
            }
            _ => diags.push(invalid(
                c,
                host,
                "q:header needs a valid header `name` and `value`".into(),
            )),
        }
    }
    TaskImpl::Http(Box::new(HttpSpec {
        from_input: false,
        method,
        url: url.or(path),
        connection,
        headers,
        body_variable: body,
    }))
}

/// Error boundaries on HTTP tasks also catch a failure whose retries are
/// spent (its `Api.*` code is the error code an `errorRef` names).
pub fn route_failures(p: &mut Process) {
    #[derive(Clone, Copy, PartialEq)]
    enum Host {
        Http,
        TimedCall,
        Other,
    }
    let hosts: Vec<Host> = p
        .nodes
        .iter()
        .map(|n| match &n.kind {
            NodeKind::ServiceTask(t) if matches!(t.implementation, TaskImpl::Http(_)) => Host::Http,
            NodeKind::CallProcess {
                timeout: Some(_), ..
            } => Host::TimedCall,
            _ => Host::Other,
        })
        .collect();
    let timeout = Code::ChildTimeout.as_str();
    for n in &mut p.nodes {
        if let NodeKind::Boundary(BoundaryEvent {
            attached_to,
            trigger:
                BoundaryTrigger::Error {
                    catch_failures,
                    codes,
                    ..
                },
            ..
        }) = &mut n.kind
        {
            match hosts.get(attached_to.0 as usize).copied() {
                Some(Host::Http) => *catch_failures = true,
                // A call activity's spent timeout is caught by a boundary
                // that names its code, never by a catch-all (a child's other
                // failures still fail the instance, as the seed says).
                Some(Host::TimedCall)
                    if codes
                        .as_ref()
                        .is_some_and(|c| c.iter().any(|c| c == timeout)) =>
                {
                    *catch_failures = true
                }
                _ => {}
            }
        }
    }
}
