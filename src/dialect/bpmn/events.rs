//! Event definitions: which trigger an event carries, and the timer, message
//! and error it names.
//!
//! Invariant: an event has at most one definition Sutra understands
//! (timer, message, error, terminate, escalation, compensate); any other definition, an
//! `eventDefinitionRef`, or several definitions on one event come back as
//! [`Def::Unsupported`] so the builder can refuse them by name. Timer errors
//! keep the time module's code (MALFORMED vs UNSUPPORTED).

use super::ext::describe;
use super::xml::Element;
use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::time::TimerSpec;
use std::collections::HashMap;

/// The root-level `<message>`s and `<error>`s events refer to.
#[derive(Debug, Default)]
pub struct Globals {
    /// message id → its `name`.
    pub messages: HashMap<String, Option<String>>,
    /// signal id → its `name` (build/signal.rs).
    pub signals: HashMap<String, Option<String>>,
    /// error id → (`errorCode`, `name`).
    pub errors: HashMap<String, (Option<String>, Option<String>)>,
    /// escalation id → its `escalationCode` (else its id: two references
    /// to one escalation match).
    pub escalations: HashMap<String, String>,
    /// global task id → its tag (`globalScriptTask`, ...): what a call
    /// activity may name that Sutra does not call.
    pub global_tasks: HashMap<String, String>,
}

impl Globals {
    pub fn collect(definitions: &Element) -> Globals {
        let mut g = Globals::default();
        for el in definitions.bpmn_children() {
            let Some(id) = el.id() else { continue };
            let text = |a: &str| {
                el.attr(a)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            match el.local.as_str() {
                "message" => {
                    g.messages
                        .entry(id.to_string())
                        .or_insert_with(|| text("name"));
                }
                "escalation" => {
                    let code = text("escalationCode").unwrap_or_else(|| id.to_string());
                    g.escalations.entry(id.to_string()).or_insert(code);
                }
                "signal" => {
                    g.signals
                        .entry(id.to_string())
                        .or_insert_with(|| text("name"));
                }
                "error" => {
                    g.errors
                        .entry(id.to_string())
                        .or_insert_with(|| (text("errorCode"), text("name")));
                }
                tag if tag.starts_with("global") && tag.ends_with("Task") => {
                    g.global_tasks.insert(id.to_string(), tag.to_string());
                }
                _ => {}
            }
        }
        g
    }
}

/// The definition an event carries.
#[derive(Debug, Clone, Copy)]
pub enum Def<'d> {
    None,
    Timer(&'d Element),
    Message(&'d Element),
    Error(&'d Element),
    Terminate(&'d Element),
    Escalation(&'d Element),
    Compensate(&'d Element),
    Conditional(&'d Element),
    /// Anything else: named in the diagnostic.
    Unsupported(&'d Element, &'static str),
}

/// The root-level event definitions (`<bpmn:errorEventDefinition id=…>` as a
/// child of `<definitions>`) an `eventDefinitionRef` may name, by id.
pub fn shared_definitions(definitions: &Element) -> HashMap<&str, &Element> {
    definitions
        .bpmn_children()
        .filter(|c| c.local.ends_with("EventDefinition"))
        .filter_map(|c| c.id().map(|id| (id, c)))
        .collect()
}

/// Classify an event's definitions: an `eventDefinitionRef` naming one of
/// `shared` stands for that definition (one that names none is refused).
pub fn definition_with<'d>(event: &'d Element, shared: &HashMap<&'d str, &'d Element>) -> Def<'d> {
    let defs: Vec<&Element> = event
        .bpmn_children()
        .filter(|c| c.local.ends_with("EventDefinition") || c.local == "eventDefinitionRef")
        .map(|c| match c.local.as_str() {
            "eventDefinitionRef" => shared.get(strip_qname(c.text.trim())).copied().unwrap_or(c),
            _ => c,
        })
        .collect();
    match defs.as_slice() {
        [] => Def::None,
        [d] => match d.local.as_str() {
            "timerEventDefinition" => Def::Timer(d),
            "messageEventDefinition" => Def::Message(d),
            "errorEventDefinition" => Def::Error(d),
            "terminateEventDefinition" => Def::Terminate(d),
            "escalationEventDefinition" => Def::Escalation(d),
            "compensateEventDefinition" => Def::Compensate(d),
            "conditionalEventDefinition" => Def::Conditional(d),
            "eventDefinitionRef" => {
                Def::Unsupported(d, "a shared event definition (eventDefinitionRef)")
            }
            _ => Def::Unsupported(d, ""),
        },
        [_, second, ..] => Def::Unsupported(second, "several event definitions"),
    }
}

impl Def<'_> {
    /// How a message names the definition: `a signal definition`.
    pub fn label(&self) -> String {
        match self {
            Def::None => "no definition".to_string(),
            Def::Unsupported(_, reason) if !reason.is_empty() => reason.to_string(),
            Def::Timer(d)
            | Def::Message(d)
            | Def::Error(d)
            | Def::Terminate(d)
            | Def::Escalation(d)
            | Def::Compensate(d)
            | Def::Conditional(d)
            | Def::Unsupported(d, _) => {
                let name = def_name(d);
                let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                format!("{article} {name} definition")
            }
        }
    }
}

/// A short name for a definition element, for messages: `signalEventDefinition` → `signal`.
pub fn def_name(def: &Element) -> &str {
    def.local
        .strip_suffix("EventDefinition")
        .unwrap_or(&def.local)
}

/// The timer of a `timerEventDefinition`: exactly one of `timeDuration`, `timeDate`, `timeCycle`.
pub fn timer(def: &Element, host: &Element) -> Result<TimerSpec, Diagnostic> {
    let parts: Vec<&Element> = def
        .bpmn_children()
        .filter(|c| matches!(c.local.as_str(), "timeDuration" | "timeDate" | "timeCycle"))
        .collect();
    let [part] = parts.as_slice() else {
        let found = if parts.is_empty() { "none" } else { "several" };
        return Err(Diagnostic::error(
            Code::BpmnInvalidAttribute,
            format!(
                "the timer of {} needs exactly one of timeDuration, timeDate, timeCycle (found {found})",
                describe(host)
            ),
        )
        .at(def.pos)
        .element(host.label()));
    };
    let text = part.text.trim();
    let parsed = match part.local.as_str() {
        "timeDuration" => TimerSpec::parse_duration(text),
        "timeDate" => TimerSpec::parse_date(text),
        _ => TimerSpec::parse_cycle(text),
    };
    parsed.map_err(|e| {
        Diagnostic::error(
            e.code,
            format!("{} of {}: {}", part.local, describe(host), e.message),
        )
        .at(part.pos)
        .element(host.label())
    })
}

/// The message name a `messageEventDefinition` refers to (`messageRef` → `<message name>`).
pub fn message_name(
    def: &Element,
    host: &Element,
    globals: &Globals,
) -> Result<String, Diagnostic> {
    let Some(r) = def
        .attr("messageRef")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return Err(Diagnostic::error(
            Code::BpmnInvalidAttribute,
            format!(
                "the message definition of {} needs a `messageRef`",
                describe(host)
            ),
        )
        .at(def.pos)
        .element(host.label()));
    };
    match globals.messages.get(strip_qname(r)) {
        Some(Some(name)) => Ok(name.clone()),
        Some(None) => Err(Diagnostic::error(
            Code::BpmnInvalidAttribute,
            format!(
                "message `{r}` referred to by {} has no `name`",
                describe(host)
            ),
        )
        .at(def.pos)
        .element(host.label())),
        None => Err(Diagnostic::error(
            Code::BpmnDanglingReference,
            format!("messageRef `{r}` of {} names no <message>", describe(host)),
        )
        .at(def.pos)
        .element(host.label())),
    }
}

/// The error code an `errorEventDefinition` refers to: `None` when it has no
/// `errorRef` (a catch-all on a boundary; an error end event requires one).
pub fn error_code(
    def: &Element,
    host: &Element,
    globals: &Globals,
) -> Result<Option<(String, Option<String>)>, Diagnostic> {
    let Some(r) = def
        .attr("errorRef")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    match globals.errors.get(strip_qname(r)) {
        Some((Some(code), name)) => Ok(Some((code.clone(), name.clone()))),
        Some((None, _)) => Err(Diagnostic::error(
            Code::BpmnInvalidAttribute,
            format!(
                "error `{r}` referred to by {} has no `errorCode`",
                describe(host)
            ),
        )
        .at(def.pos)
        .element(host.label())),
        None => Err(Diagnostic::error(
            Code::BpmnDanglingReference,
            format!("errorRef `{r}` of {} names no <error>", describe(host)),
        )
        .at(def.pos)
        .element(host.label())),
    }
}

/// The escalation code an `escalationEventDefinition` refers to: `None`
/// when it has no `escalationRef` (a catch-all on a catcher).
pub fn escalation_code(
    def: &Element,
    host: &Element,
    globals: &Globals,
) -> Result<Option<String>, Diagnostic> {
    let Some(r) = def
        .attr("escalationRef")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    match globals.escalations.get(strip_qname(r)) {
        Some(code) => Ok(Some(code.clone())),
        None => Err(Diagnostic::error(
            Code::BpmnDanglingReference,
            format!(
                "escalationRef `{r}` of {} names no <escalation>",
                describe(host)
            ),
        )
        .at(def.pos)
        .element(host.label())),
    }
}

/// References are QNames in the schema (`tns:Msg_1`); ids are local.
pub fn strip_qname(r: &str) -> &str {
    r.rsplit_once(':').map(|(_, local)| local).unwrap_or(r)
}
