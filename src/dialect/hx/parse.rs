//! HX elements → checked nodes and edges (attributes, values, durations,
//! policies). Graph-level checks come after, in `graph`.
//!
//! Strict by design: an element or attribute HX does not define is an error
//! (never silently ignored), except `xsi:` and `xml:` attributes.

use crate::codes::{Code, ErrorClass};
use crate::diag::{Diagnostic, Pos};
use crate::dialect::xml::{Document, Element, Ns};
use crate::model::{
    Backoff, Expr, Jitter, JoinRule, OnTimeout, RetryPolicy, TaskImpl, TaskTimeout,
};
use crate::time::{IsoDuration, TimeError, TimerSpec};

/// The longest node id accepted.
const MAX_ID_LEN: usize = 200;

pub(super) struct Workflow<'d> {
    pub id: String,
    pub name: Option<String>,
    pub pos: Pos,
    pub nodes: Vec<RawNode<'d>>,
    pub edges: Vec<RawEdge<'d>>,
}

pub(super) struct RawNode<'d> {
    pub el: &'d Element,
    pub id: String,
    pub kind: RawKind,
    pub join: JoinRule,
    /// `compensates="..."` and where it was written.
    pub compensates: Option<String>,
}

pub(super) enum RawKind {
    Task {
        implementation: TaskImpl,
        /// Where the result goes (an `http` node's `result`); `None`: merged.
        result_path: Option<String>,
        retry: Option<RetryPolicy>,
        timeout: Option<TaskTimeout>,
        idempotent: bool,
    },
    Wait(TimerSpec),
    Pass,
    /// A node refused by a diagnostic (kept so edges to it do not also dangle).
    Invalid,
}

impl RawKind {
    pub fn is_task(&self) -> bool {
        matches!(self, RawKind::Task { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EdgeKind {
    Control,
    Data,
    Error,
    Compensation,
}

impl EdgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Control => "control",
            EdgeKind::Data => "data",
            EdgeKind::Error => "error",
            EdgeKind::Compensation => "compensation",
        }
    }

    /// Control, data and error edges order execution.
    pub fn is_forward(self) -> bool {
        !matches!(self, EdgeKind::Compensation)
    }
}

pub(super) struct RawEdge<'d> {
    pub el: &'d Element,
    pub from: String,
    pub to: String,
    pub kind: EdgeKind,
    pub when: Option<Expr>,
}

fn diag(code: Code, el: &Element, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(code, message)
        .at(el.pos)
        .element(el.label().to_string())
}

/// Report every attribute of `el` not in `allowed` (HX-1003).
fn check_attrs(el: &Element, allowed: &[&str], what: &str, out: &mut Vec<Diagnostic>) {
    for a in &el.attrs {
        match a.ns {
            Ns::Xsi | Ns::Xml => continue,
            Ns::None if allowed.contains(&a.local.as_str()) => continue,
            _ => {}
        }
        let hint = if allowed.is_empty() {
            "it takes no attributes".to_string()
        } else {
            format!("allowed: {}", allowed.join(", "))
        };
        out.push(diag(
            Code::HxUnknownAttribute,
            el,
            format!("`{}` is not an attribute of {what} ({hint})", a.qname),
        ));
    }
}

fn required<'e>(
    el: &'e Element,
    name: &str,
    what: &str,
    out: &mut Vec<Diagnostic>,
) -> Option<&'e str> {
    match el.attr(name) {
        Some(v) if !v.trim().is_empty() => Some(v.trim()),
        _ => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                format!("{what} needs a `{name}` attribute"),
            ));
            None
        }
    }
}

fn boolean(el: &Element, name: &str, default: bool, code: Code, out: &mut Vec<Diagnostic>) -> bool {
    match el.attr(name).map(str::trim) {
        None => default,
        Some("true") => true,
        Some("false") => false,
        Some(other) => {
            out.push(diag(
                code,
                el,
                format!("`{name}` must be `true` or `false`, not `{other}`"),
            ));
            default
        }
    }
}

/// A valid HX id: 1 to 200 of `A-Z a-z 0-9 _ - . :`.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// Map a time parse error onto HX-3401 (well-formed, unsupported) or HX-3402.
fn time_diag(e: TimeError, el: &Element, attr: &str) -> Diagnostic {
    let code = if e.code == Code::TimerUnsupported {
        Code::HxDurationUnsupported
    } else {
        Code::HxDurationMalformed
    };
    diag(code, el, format!("`{attr}`: {}", e.message))
}

fn duration(el: &Element, attr: &str, out: &mut Vec<Diagnostic>) -> Option<IsoDuration> {
    let text = el.attr(attr)?;
    match IsoDuration::parse(text) {
        Ok(d) => Some(d),
        Err(e) => {
            out.push(time_diag(e, el, attr));
            None
        }
    }
}

/// Parse the document's root as a workflow. `None` when it is not one at all.
pub(super) fn workflow<'d>(doc: &'d Document, out: &mut Vec<Diagnostic>) -> Option<Workflow<'d>> {
    let root = &doc.root;
    if root.local != "workflow" {
        out.push(diag(
            Code::HxNotWorkflow,
            root,
            format!(
                "the root element is `<{}>`, not an HX `<workflow>`",
                root.qname
            ),
        ));
        return None;
    }
    check_attrs(root, &["id", "name", "version"], "`<workflow>`", out);
    let id = match root.attr("id").map(str::trim) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => {
            out.push(diag(
                Code::HxNotWorkflow,
                root,
                "`<workflow>` needs an `id`",
            ));
            "workflow".to_string()
        }
    };
    let mut wf = Workflow {
        id,
        name: root.attr("name").map(str::to_string),
        pos: root.pos,
        nodes: Vec::new(),
        edges: Vec::new(),
    };
    let mut edges_seen = false;
    for child in &root.children {
        match (child.ns == root.ns, child.local.as_str()) {
            (true, "node") => wf.nodes.push(node(child, out)),
            (true, "edges") => {
                if edges_seen {
                    out.push(diag(
                        Code::HxUnknownElement,
                        child,
                        "a workflow has one `<edges>` element; put every edge in the first",
                    ));
                }
                edges_seen = true;
                check_attrs(child, &[], "`<edges>`", out);
                for e in &child.children {
                    if e.ns == root.ns && e.local == "edge" {
                        if let Some(edge) = edge(e, out) {
                            wf.edges.push(edge);
                        }
                    } else {
                        out.push(diag(
                            Code::HxUnknownElement,
                            e,
                            format!("`<{}>` is not allowed in `<edges>` (only `<edge>`)", e.qname),
                        ));
                    }
                }
            }
            _ => out.push(diag(
                Code::HxUnknownElement,
                child,
                format!(
                    "`<{}>` is not allowed in `<workflow>` (only `<node>` and `<edges>`, in the workflow's namespace)",
                    child.qname
                ),
            )),
        }
    }
    Some(wf)
}

const NODE_ATTRS: [&str; 9] = [
    "id",
    "type",
    "name",
    "impl",
    "idempotent",
    "compensates",
    "join",
    "duration",
    "until",
];

fn node<'d>(el: &'d Element, out: &mut Vec<Diagnostic>) -> RawNode<'d> {
    let id = match el.attr("id").map(str::trim) {
        Some(id) if valid_id(id) => id.to_string(),
        Some(id) => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                format!(
                    "node id `{id}` is not valid: use 1 to {MAX_ID_LEN} of A-Z a-z 0-9 _ - . :"
                ),
            ));
            String::new()
        }
        None => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                "a `<node>` needs an `id`",
            ));
            String::new()
        }
    };
    let join = match el.attr("join").map(str::trim) {
        None | Some("all") => JoinRule::All,
        Some("any") => JoinRule::Any,
        Some(other) => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                format!("`join` must be `all` or `any`, not `{other}`"),
            ));
            JoinRule::All
        }
    };
    let what = format!("node `{id}`");
    let ty = el.attr("type").map(str::trim);
    let allowed: &[&str] = match ty {
        Some("task") => &[
            "id",
            "type",
            "name",
            "impl",
            "idempotent",
            "compensates",
            "join",
        ],
        Some("http") => &[
            "id",
            "type",
            "name",
            "idempotent",
            "compensates",
            "join",
            "method",
            "url",
            "connection",
            "path",
            "body",
            "result",
        ],
        Some("wait") => &["id", "type", "name", "join", "duration", "until"],
        Some("pass") => &["id", "type", "name", "join"],
        _ => &NODE_ATTRS,
    };
    check_attrs(el, allowed, &format!("a `{}` node", ty.unwrap_or("?")), out);
    let kind = match ty {
        Some("task") => task(el, &what, out, false),
        Some("http") => task(el, &what, out, true),
        Some("wait") => {
            no_children(el, out);
            wait(el, &what, out)
        }
        Some("pass") => {
            no_children(el, out);
            RawKind::Pass
        }
        Some(other) => {
            out.push(diag(
                Code::HxUnknownNodeType,
                el,
                format!("node type `{other}` is not known (use task, http, wait or pass)"),
            ));
            RawKind::Invalid
        }
        None => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                format!("{what} needs a `type` (task, http, wait or pass)"),
            ));
            RawKind::Invalid
        }
    };
    let compensates = match (ty, el.attr("compensates").map(str::trim)) {
        (Some("task" | "http"), Some(c)) => Some(c.to_string()),
        _ => None,
    };
    RawNode {
        el,
        id,
        kind: if el.attr("id").is_some_and(|i| valid_id(i.trim())) {
            kind
        } else {
            RawKind::Invalid
        },
        join,
        compensates,
    }
}

fn no_children(el: &Element, out: &mut Vec<Diagnostic>) {
    for c in &el.children {
        out.push(diag(
            Code::HxUnknownElement,
            c,
            format!(
                "`<{}>` is not allowed here: only a task node takes `<retry>` and `<timeout>`",
                c.qname
            ),
        ));
    }
}

fn task(el: &Element, what: &str, out: &mut Vec<Diagnostic>, http: bool) -> RawKind {
    let implementation = if http {
        Some(super::http::spec(el, what, out))
    } else {
        required(el, "impl", what, out).map(|s| TaskImpl::Registered(s.to_string()))
    };
    let idempotent = boolean(el, "idempotent", true, Code::HxInvalidAttribute, out);
    let mut retry_el: Option<&Element> = None;
    let mut timeout_el: Option<&Element> = None;
    for c in &el.children {
        let slot = match (c.ns == el.ns, c.local.as_str()) {
            (true, "retry") => &mut retry_el,
            (true, "timeout") => &mut timeout_el,
            // Read by `http::spec`.
            (true, "header") if http => continue,
            _ => {
                out.push(diag(
                    Code::HxUnknownElement,
                    c,
                    format!(
                        "`<{}>` is not allowed in a task (only `<retry>` and `<timeout>`)",
                        c.qname
                    ),
                ));
                continue;
            }
        };
        if slot.is_some() {
            out.push(diag(
                Code::HxUnknownElement,
                c,
                format!("{what} has a second `<{}>`", c.local),
            ));
            continue;
        }
        *slot = Some(c);
    }
    let retry = retry_el.and_then(|r| retry(r, out));
    if let (false, Some(r)) = (idempotent, retry_el) {
        out.push(
            diag(
                Code::HxNonIdempotentRetry,
                el,
                format!(
                    "{what} is idempotent=\"false\" and has a `<retry>` (line {}): a non-idempotent task is never retried; move the retry to an idempotent step or remove it",
                    r.pos.line
                ),
            ),
        );
    }
    let timeout = timeout_el.and_then(|t| timeout(t, out));
    match implementation {
        Some(implementation) => RawKind::Task {
            implementation,
            result_path: if http {
                super::http::result_path(el)
            } else {
                None
            },
            retry,
            timeout,
            idempotent,
        },
        None => RawKind::Invalid,
    }
}

fn retry(el: &Element, out: &mut Vec<Diagnostic>) -> Option<RetryPolicy> {
    check_attrs(
        el,
        &[
            "maxAttempts",
            "backoff",
            "initialDelay",
            "maxDelay",
            "multiplier",
            "jitter",
            "retryOn",
        ],
        "`<retry>`",
        out,
    );
    no_children(el, out);
    let before = out.len();
    let bad = |out: &mut Vec<Diagnostic>, m: String| out.push(diag(Code::HxInvalidRetry, el, m));
    let max_attempts = match el.attr("maxAttempts").map(str::trim) {
        None => 3,
        Some(t) => match t.parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                bad(out, format!("`maxAttempts` must be a whole number of at least 1 (it counts attempts, the first included), not `{t}`"));
                1
            }
        },
    };
    let multiplier = match el.attr("multiplier").map(str::trim) {
        None => 2.0,
        Some(t) => match t.parse::<f64>() {
            Ok(m) if m.is_finite() && m > 0.0 && m <= 1000.0 => m,
            _ => {
                bad(
                    out,
                    format!("`multiplier` must be a number above 0 (at most 1000), not `{t}`"),
                );
                2.0
            }
        },
    };
    let backoff = match el.attr("backoff").map(str::trim) {
        None | Some("exponential") => Backoff::Exponential {
            coefficient: multiplier,
        },
        Some("fixed") => Backoff::Fixed,
        Some("linear") => Backoff::Linear,
        Some(other) => {
            bad(
                out,
                format!("`backoff` must be exponential, fixed or linear, not `{other}`"),
            );
            Backoff::Fixed
        }
    };
    let jitter = if boolean(el, "jitter", true, Code::HxInvalidRetry, out) {
        Jitter::Full
    } else {
        Jitter::None
    };
    let retry_on = match el.attr("retryOn") {
        // The seed: omitting retryOn retries any failure (every class).
        None => ErrorClass::ALL.to_vec(),
        Some(text) => {
            let mut classes = Vec::new();
            for word in text.split_whitespace() {
                match ErrorClass::parse(word) {
                    Some(c) if !classes.contains(&c) => classes.push(c),
                    Some(_) => {}
                    None => bad(out, format!(
                        "`retryOn`: `{word}` is not an error class (transient rate_limit timeout invalid_input resource_exhausted internal)"
                    )),
                }
            }
            if text.trim().is_empty() {
                bad(out, "`retryOn` is empty: name at least one class, or leave it out to retry any failure".into());
            }
            classes
        }
    };
    let initial_delay = match el.attr("initialDelay") {
        None => Some(IsoDuration::from_secs(1)),
        Some(_) => duration(el, "initialDelay", out),
    };
    let max_delay = duration(el, "maxDelay", out);
    if out.len() > before {
        return None;
    }
    Some(RetryPolicy {
        error_equals: None,
        max_attempts,
        initial_delay: initial_delay?,
        backoff,
        max_delay,
        jitter,
        non_retryable_codes: Vec::new(),
        retry_on: Some(retry_on),
    })
}

fn timeout(el: &Element, out: &mut Vec<Diagnostic>) -> Option<TaskTimeout> {
    check_attrs(el, &["duration", "onTimeout"], "`<timeout>`", out);
    no_children(el, out);
    let on_timeout = match el.attr("onTimeout").map(str::trim) {
        None | Some("retry") => OnTimeout::Retry,
        Some("fail") => OnTimeout::Fail,
        Some("skip") => OnTimeout::Skip,
        Some(other) => {
            out.push(diag(
                Code::HxInvalidTimeout,
                el,
                format!("`onTimeout` must be retry, fail or skip, not `{other}`"),
            ));
            return None;
        }
    };
    if el.attr("duration").is_none() {
        out.push(diag(
            Code::HxInvalidTimeout,
            el,
            "`<timeout>` needs a `duration`",
        ));
        return None;
    }
    let d = duration(el, "duration", out)?;
    if d.is_zero() {
        out.push(diag(
            Code::HxInvalidTimeout,
            el,
            "a zero `duration` would time out every attempt",
        ));
        return None;
    }
    Some(TaskTimeout {
        duration: d,
        on_timeout,
    })
}

fn wait(el: &Element, what: &str, out: &mut Vec<Diagnostic>) -> RawKind {
    let spec = match (el.attr("duration"), el.attr("until")) {
        (Some(d), None) => TimerSpec::parse_duration(d).map_err(|e| time_diag(e, el, "duration")),
        (None, Some(u)) => TimerSpec::parse_date(u).map_err(|e| time_diag(e, el, "until")),
        _ => Err(diag(
            Code::HxInvalidAttribute,
            el,
            format!("{what} (a wait) needs exactly one of `duration` (ISO-8601 duration) and `until` (date-time with offset)"),
        )),
    };
    match spec {
        Ok(s) => RawKind::Wait(s),
        Err(d) => {
            out.push(d);
            RawKind::Invalid
        }
    }
}

fn edge<'d>(el: &'d Element, out: &mut Vec<Diagnostic>) -> Option<RawEdge<'d>> {
    check_attrs(el, &["from", "to", "type", "when"], "`<edge>`", out);
    no_children(el, out);
    let from = required(el, "from", "an `<edge>`", out);
    let to = required(el, "to", "an `<edge>`", out);
    let kind = match el.attr("type").map(str::trim) {
        None | Some("control") => EdgeKind::Control,
        Some("data") => EdgeKind::Data,
        Some("error") => EdgeKind::Error,
        Some("compensation") => EdgeKind::Compensation,
        Some(other) => {
            out.push(diag(
                Code::HxInvalidAttribute,
                el,
                format!("edge `type` must be control, data, error or compensation, not `{other}`"),
            ));
            return None;
        }
    };
    let when = match el.attr("when") {
        None => None,
        Some(_) if kind != EdgeKind::Control => {
            out.push(diag(
                Code::HxInvalidEdge,
                el,
                format!(
                    "only a control edge takes a `when` guard, not a {} edge",
                    kind.as_str()
                ),
            ));
            return None;
        }
        Some(text) => match Expr::parse_condition(text) {
            Ok(e) => Some(e),
            Err(e) => {
                out.push(diag(
                    e.load_code(),
                    el,
                    format!("`when` is not a valid CEL condition: {e}"),
                ));
                return None;
            }
        },
    };
    Some(RawEdge {
        el,
        from: from?.to_string(),
        to: to?.to_string(),
        kind,
        when,
    })
}
