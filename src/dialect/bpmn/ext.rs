//! Extension elements: Sutra's own `q:` vocabulary, and the foreign
//! extensions (`camunda:`, `zeebe:`, ...) that are ignored with an info.
//!
//! Invariant: every `q:` element and every attribute on it is either
//! understood or reported (`BPMN_INVALID_ATTRIBUTE` for a bad or unknown
//! attribute, `BPMN_UNSUPPORTED_ELEMENT` for an unknown or misplaced element);
//! a timer or duration error keeps the time module's code (MALFORMED vs
//! UNSUPPORTED).

use super::xml::{Element, Ns};
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::{Backoff, Expr, IoMapping, Jitter, OnTimeout, RetryPolicy, TaskTimeout};
use crate::time::IsoDuration;

/// The `q:` elements Sutra knows, by local name.
pub const Q_ELEMENTS: &[&str] = &[
    "retry",
    "timeout",
    "io",
    "source",
    "correlation",
    "multiInstance",
    "call",
    "http",
    "businessKey",
];

/// `tag `id`` (or just the tag when the element has no id): how messages name an element.
pub fn describe(el: &Element) -> String {
    match el.id() {
        Some(id) => format!("{} `{id}`", el.local),
        None => format!("`{}`", el.qname),
    }
}

/// A parser's message on one line, bounded (CEL errors span several lines).
pub fn one_line(message: &str) -> String {
    let first = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match first.char_indices().nth(240) {
        Some((cut, _)) => format!("{}…", &first[..cut]),
        None => first.to_string(),
    }
}

/// The `q:` elements inside an element's `extensionElements`, in document order.
pub fn q_elements(el: &Element) -> Vec<&Element> {
    el.bpmn_children()
        .filter(|c| c.local == "extensionElements")
        .flat_map(|ext| ext.children.iter())
        .filter(|c| c.ns == Ns::Q)
        .collect()
}

/// The one `q:<local>` of an element, reporting a repeated one.
pub fn single<'d>(
    qs: &[&'d Element],
    local: &str,
    host: &Element,
    diags: &mut Vec<Diagnostic>,
) -> Option<&'d Element> {
    let mut found = qs.iter().filter(|q| q.local == local);
    let first = found.next().copied();
    if let Some(second) = found.next() {
        diags.push(
            Diagnostic::error(
                Code::BpmnInvalidAttribute,
                format!("{} has more than one q:{local}", describe(host)),
            )
            .at(second.pos)
            .element(host.label()),
        );
    }
    first
}

/// Report every `q:` element of `host` whose local name is not in `allowed`.
pub fn misplaced(qs: &[&Element], allowed: &[&str], host: &Element, diags: &mut Vec<Diagnostic>) {
    for q in qs {
        if allowed.contains(&q.local.as_str()) {
            continue;
        }
        let message = if q.local == "multiInstance" {
            format!(
                "q:multiInstance is not allowed on {}: it belongs in the extensionElements of its \
                 <multiInstanceLoopCharacteristics>",
                describe(host)
            )
        } else if Q_ELEMENTS.contains(&q.local.as_str()) {
            format!("q:{} is not allowed on {}", q.local, describe(host))
        } else {
            format!(
                "unknown Sutra extension q:{} on {}",
                q.local,
                describe(host)
            )
        };
        diags.push(
            Diagnostic::error(Code::BpmnUnsupportedElement, message)
                .at(q.pos)
                .element(host.label()),
        );
    }
}

/// One info naming the foreign extensions on an element, if it has any:
/// attributes in a foreign namespace, foreign children of `extensionElements`,
/// foreign direct children.
pub fn foreign(el: &Element) -> Option<Diagnostic> {
    let is_foreign = |ns: Ns| matches!(ns, Ns::Other(_));
    let mut names: Vec<String> = el
        .attrs
        .iter()
        .filter(|a| is_foreign(a.ns))
        .map(|a| a.qname.clone())
        .collect();
    for child in &el.children {
        if child.is(Ns::Bpmn, "extensionElements") {
            names.extend(
                child
                    .children
                    .iter()
                    .filter(|c| c.ns != Ns::Q)
                    .map(|c| c.qname.clone()),
            );
        } else if is_foreign(child.ns) || child.ns == Ns::None {
            names.push(child.qname.clone());
        }
    }
    if names.is_empty() {
        return None;
    }
    names.sort();
    names.dedup();
    let shown: Vec<&str> = names.iter().take(6).map(String::as_str).collect();
    let more = if names.len() > shown.len() {
        format!(" and {} more", names.len() - shown.len())
    } else {
        String::new()
    };
    Some(
        Diagnostic::info(
            Code::BpmnForeignExtension,
            format!(
                "foreign extensions on {} are ignored: {}{more}",
                describe(el),
                shown.join(", ")
            ),
        )
        .at(el.pos)
        .element(el.label()),
    )
}

/// Attributes in the `q:` namespace on BPMN elements (anywhere in `root`):
/// Sutra's extensions are elements inside `<extensionElements>`, so every such
/// attribute is unknown and refused, never ignored (`BPMN_INVALID_ATTRIBUTE`).
/// Unqualified attributes, and those of other tools' namespaces, are not
/// looked at here. Attributes of `q:` elements are checked by their readers.
pub fn q_attributes(root: &Element, diags: &mut Vec<Diagnostic>) {
    let mut stack = vec![root];
    while let Some(el) = stack.pop() {
        if el.ns == Ns::Q {
            continue;
        }
        for a in el.attrs.iter().filter(|a| a.ns == Ns::Q) {
            diags.push(
                Diagnostic::error(
                    Code::BpmnInvalidAttribute,
                    format!(
                        "unknown Sutra attribute `{}` on {}: Sutra's extensions are elements inside \
                         <extensionElements> ({})",
                        a.qname,
                        describe(el),
                        Q_ELEMENTS
                            .iter()
                            .map(|q| format!("q:{q}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .at(el.pos)
                .element(el.label()),
            );
        }
        stack.extend(el.children.iter().rev());
    }
}

/// `<q:businessKey variable="orderId"/>` on a process: the start variable
/// whose value becomes an instance's business key when its start names
/// none. A missing or empty `variable` is reported (`None`).
pub fn business_key(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> Option<String> {
    unknown_attrs(q, host, &["variable"], diags);
    let v = q.attr("variable").map(str::trim).filter(|v| !v.is_empty());
    if v.is_none() {
        diags.push(invalid(
            q,
            host,
            format!(
                "q:businessKey of {} needs a `variable`: the start variable whose value is the business key",
                describe(host)
            ),
        ));
    }
    v.map(str::to_string)
}

fn invalid(q: &Element, host: &Element, message: String) -> Diagnostic {
    Diagnostic::error(Code::BpmnInvalidAttribute, message)
        .at(q.pos)
        .element(host.label())
}

/// Report attributes on a `q:` element that are not in `allowed`.
fn unknown_attrs(q: &Element, host: &Element, allowed: &[&str], diags: &mut Vec<Diagnostic>) {
    for a in &q.attrs {
        if a.ns == Ns::None && allowed.contains(&a.local.as_str()) {
            continue;
        }
        if matches!(a.ns, Ns::Xsi | Ns::Xml) {
            continue;
        }
        diags.push(invalid(
            q,
            host,
            format!(
                "unknown attribute `{}` on q:{} of {} (expected one of: {})",
                a.qname,
                q.local,
                describe(host),
                allowed.join(", ")
            ),
        ));
    }
}

fn required<'e>(
    q: &'e Element,
    host: &Element,
    attr: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<&'e str> {
    match q.attr(attr).map(str::trim) {
        Some(v) if !v.is_empty() => Some(v),
        _ => {
            diags.push(invalid(
                q,
                host,
                format!(
                    "q:{} on {} needs a non-empty `{attr}` attribute",
                    q.local,
                    describe(host)
                ),
            ));
            None
        }
    }
}

/// A duration attribute; a bad one keeps the time module's code.
fn duration(
    q: &Element,
    host: &Element,
    attr: &str,
    value: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<IsoDuration> {
    match IsoDuration::parse(value) {
        Ok(d) => Some(d),
        Err(e) => {
            diags.push(
                Diagnostic::error(
                    e.code,
                    format!(
                        "{attr} on q:{} of {}: {}",
                        q.local,
                        describe(host),
                        e.message
                    ),
                )
                .at(q.pos)
                .element(host.label()),
            );
            None
        }
    }
}

/// `<q:retry maxAttempts initialDelay backoffCoefficient maxDelay nonRetryableCodes jitter>`.
pub fn retry(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> Option<RetryPolicy> {
    const ATTRS: &[&str] = &[
        "maxAttempts",
        "initialDelay",
        "backoffCoefficient",
        "maxDelay",
        "nonRetryableCodes",
        "jitter",
    ];
    let before = diags.len();
    unknown_attrs(q, host, ATTRS, diags);
    let max_attempts =
        required(q, host, "maxAttempts", diags).and_then(|v| match v.parse::<u32>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                diags.push(invalid(
                    q,
                    host,
                    format!(
                        "maxAttempts=\"{v}\" on q:retry of {}: must be an integer ≥ 1",
                        describe(host)
                    ),
                ));
                None
            }
        });
    let initial_delay = match q.attr("initialDelay").map(str::trim) {
        Some(v) => duration(q, host, "initialDelay", v, diags),
        None => Some(IsoDuration::from_millis(1000)),
    };
    let coefficient = match q.attr("backoffCoefficient").map(str::trim) {
        None => Some(2.0),
        Some(v) => match v.parse::<f64>() {
            Ok(c) if c.is_finite() && c >= 1.0 => Some(c),
            _ => {
                diags.push(invalid(
                    q,
                    host,
                    format!(
                        "backoffCoefficient=\"{v}\" on q:retry of {}: must be a finite number ≥ 1.0",
                        describe(host)
                    ),
                ));
                None
            }
        },
    };
    let max_delay = match q.attr("maxDelay").map(str::trim) {
        Some(v) => duration(q, host, "maxDelay", v, diags).map(Some),
        None => Some(None),
    };
    let jitter = match q.attr("jitter").map(str::trim) {
        None | Some("none") => Some(Jitter::None),
        Some("full") => Some(Jitter::Full),
        Some(v) => {
            diags.push(invalid(
                q,
                host,
                format!(
                    "jitter=\"{v}\" on q:retry of {}: must be `none` or `full`",
                    describe(host)
                ),
            ));
            None
        }
    };
    let non_retryable_codes: Vec<String> = q
        .attr("nonRetryableCodes")
        .unwrap_or("")
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if diags.len() > before {
        return None;
    }
    Some(RetryPolicy {
        error_equals: None,
        max_attempts: max_attempts?,
        initial_delay: initial_delay?,
        backoff: Backoff::Exponential {
            coefficient: coefficient?,
        },
        max_delay: max_delay?,
        jitter: jitter?,
        non_retryable_codes,
        retry_on: None,
    })
}

/// `<q:timeout duration="PT30S"/>`.
pub fn timeout(
    q: &Element,
    host: &Element,
    has_retry: bool,
    diags: &mut Vec<Diagnostic>,
) -> Option<TaskTimeout> {
    unknown_attrs(q, host, &["duration"], diags);
    let value = required(q, host, "duration", diags)?;
    let duration = duration(q, host, "duration", value, diags)?;
    // Without a policy the expiry is a catchable BPMN error (seed 000), on a
    // registered task as on a channel call.
    let on_timeout = if has_retry {
        OnTimeout::Retry
    } else {
        OnTimeout::Error
    };
    Some(TaskTimeout {
        duration,
        on_timeout,
    })
}

/// `<q:io inputPath="$.x" resultPath="$.y"/>`.
pub fn io(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> IoMapping {
    unknown_attrs(q, host, &["inputPath", "resultPath"], diags);
    // The engine reads and writes exactly the paths `var_path_segments`
    // accepts; anything else is refused here, before any instance runs.
    let mut path = |attr: &str| -> Option<String> {
        let v = q.attr(attr)?.trim();
        if !v.starts_with('$') {
            diags.push(invalid(
                q,
                host,
                format!(
                    "{attr}=\"{}\" on q:io of {}: a variable path starting with `$`",
                    one_line(v),
                    describe(host)
                ),
            ));
            return None;
        }
        match crate::model::var_path_segments(v) {
            Ok(_) => Some(v.to_string()),
            Err(_) => {
                let what = if serde_json_path::JsonPath::parse(v).is_ok() {
                    "a JSONPath query Sutra does not support here"
                } else {
                    "not a valid path"
                };
                diags.push(invalid(
                    q,
                    host,
                    format!(
                        "{attr}=\"{}\" on q:io of {}: {what}; a q:io path is `$` or `$.name` with more \
                         `.name` steps (no index, bracket, wildcard, filter or `..` steps, no spaces)",
                        one_line(v),
                        describe(host)
                    ),
                ));
                None
            }
        }
    };
    let input_path = path("inputPath");
    let result_path = path("resultPath");
    IoMapping {
        input_path,
        result_path,
    }
}

/// `<q:source name="..."/>`: the inbound channel that starts the process.
pub fn source(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> Option<String> {
    unknown_attrs(q, host, &["name"], diags);
    required(q, host, "name", diags).map(str::to_string)
}

/// `<q:correlation key="<CEL>"/>`: a syntax error is `CONDITION.SYNTAX` at the element.
pub fn correlation(q: &Element, host: &Element, diags: &mut Vec<Diagnostic>) -> Option<Expr> {
    unknown_attrs(q, host, &["key"], diags);
    let key = required(q, host, "key", diags)?;
    match crate::model::Expr::parse(key) {
        Ok(e) => Some(e),
        Err(e) => {
            diags.push(
                Diagnostic::error(
                    e.load_code(),
                    format!(
                        "correlation key `{key}` on {}: {}",
                        describe(host),
                        one_line(&e.to_string())
                    ),
                )
                .at(q.pos)
                .element(host.label()),
            );
            None
        }
    }
}
