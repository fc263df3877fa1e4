//! BPMN 2.0 XML with Sutra's `q:` extension namespace → [`model::Definitions`].
//!
//! Namespaces are matched by URI, whatever the prefix (`bpmn:`, `bpmn2:`,
//! `semantic:`, the default namespace):
//! - BPMN: `http://www.omg.org/spec/BPMN/20100524/MODEL` ([`BPMN_NS`]);
//! - Sutra's extensions: `https://sutra.dev/bpmn/q/1.0` ([`Q_NS`]), written
//!   inside `<extensionElements>`: `q:retry`, `q:timeout`, `q:io` (service
//!   tasks; `q:io`, `q:retry` and `q:call` on call activities), `q:source`
//!   (process start events), `q:correlation` (message catch and boundary
//!   events), `q:multiInstance` (inside a `multiInstanceLoopCharacteristics`).
//!
//! Invariants:
//! - [`load`] never panics and never fails: every problem is a [`Diagnostic`]
//!   with a stable code and the line:column of the element concerned;
//! - whatever the diagnostics, the returned IR satisfies the `model`
//!   invariants (indices in bounds, incoming/outgoing consistent, boundaries
//!   attached to activities); only a load with [`Loaded::ok`] may be executed;
//! - an element Sutra cannot execute inside an executable process is an error
//!   naming it (`SUTRA.CONFIG.BPMN.UNSUPPORTED_ELEMENT`), never a silent
//!   pass-through. In the IR it stands as an opaque placeholder (a `Pass`, or a
//!   none start/end for events of those kinds) that the structural checks
//!   treat as reached and do not report again.
//!
//! Decisions:
//! - `isExecutable` absent means **not executable** (the BPMN default). A
//!   non-executable process loads for inspection only: one info diagnostic
//!   (`SUTRA.CONFIG.BPMN.NOT_EXECUTABLE`), its other diagnostics are dropped.
//! - Foreign extensions (`camunda:`, `zeebe:`, any namespace but BPMN, `q:`,
//!   `xsi:`, `xml:`) on elements of an executable process are ignored with one
//!   info diagnostic per element (`SUTRA.CONFIG.BPMN.FOREIGN_EXTENSION_IGNORED`).
//!   DI, collaborations and artifacts are ignored silently.
//! - Conditions are CEL (`language` absent or `cel`); flows out of an
//!   exclusive or inclusive gateway or an activity may carry one. The
//!   `default` flow of an activity or inclusive gateway gets the negation of
//!   its siblings' conditions, so "every flow whose condition holds" is
//!   BPMN's rule.
//! - A `q:timeout` is stored with `on_timeout: Retry` when the task has a retry
//!   policy and `Error` otherwise (a BPMN error an error boundary catches,
//!   with the timeout's code); the engine decides the rest.
//! - What BPMN leaves implicit is explicit in the IR: an activity or
//!   intermediate event without outgoing flow ends its token; a scope
//!   without a start event gets a synthetic none start `<scope>#implicit-start`
//!   leading to every node without an incoming flow; an error end event
//!   without `errorRef` throws `SUTRA.RUNTIME.BPMN.UNNAMED_ERROR`; an
//!   activity with loop characteristics is a fan-out body `<id>#body` over
//!   one branch scope per iteration with the activity inside
//!   (`build::repeat`); a call activity is a process call whose child's BPMN
//!   error is raised at the call (`build::call`).
//! - Refused rather than ignored: `startQuantity`/`completionQuantity` ≠ 1,
//!   any `q:`-qualified attribute on a BPMN element, a `q:io` path other than
//!   `$` / `$.a.b` (the engine's variable paths).
//! - `RETRY_NOT_APPLICABLE` for a timer boundary with outgoing flows applies to
//!   an *interrupting* one: a non-interrupting timer (a reminder) does not end
//!   the attempt, so the policy still applies.
//! - Hostile input is bounded (see `xml`): 16 MiB, 256 levels, 64 KiB per
//!   value, 100 000 elements, no DTD. The CEL parser, which panics on some
//!   syntax errors, is called behind a guard (see `guard`).
//!
//! Modules: `xml` (reader, limits, positions), `build` (elements → IR, then
//! `build::resolve` for references; `build::repeat` for loop
//! characteristics, `build::call` for call activities), `events` (event definitions), `ext` (`q:`
//! and foreign extensions), `validate` (dialect-independent structural checks).

mod build;
mod events;
mod ext;
// q:http: the HTTP task (issue 31).
mod http;
pub mod validate;

/// The shared hostile-input XML reader (`dialect::xml`).
use super::xml;

pub use xml::{BPMN_NS, Q_NS};

use crate::codes::Code;
use crate::diag::Diagnostic;
use crate::model::Definitions;

pub use super::Loaded;

/// Load a BPMN document. Never panics; every problem is a diagnostic.
/// Diagnostics come sorted by position.
pub fn load(source: &str) -> Loaded {
    let (definitions, mut diagnostics) = match xml::parse(source) {
        Ok(doc) => build::definitions(&doc),
        Err(d) => (
            Definitions {
                processes: Vec::new(),
            },
            vec![d],
        ),
    };
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Loaded {
        definitions,
        diagnostics,
    }
}

/// Load a document from bytes: UTF-8 (a BOM allowed), or ISO-8859-1 when
/// its XML declaration says so. Anything else is `SUTRA.CONFIG.XML.MALFORMED`.
pub fn load_bytes(bytes: &[u8]) -> Loaded {
    match decode(bytes) {
        Ok(text) => load(&text),
        Err(d) => Loaded {
            definitions: Definitions {
                processes: Vec::new(),
            },
            diagnostics: vec![d],
        },
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, Diagnostic> {
    if bytes.len() > xml::MAX_DOCUMENT_BYTES {
        return Err(Diagnostic::error(
            Code::XmlLimitExceeded,
            format!(
                "document is {} bytes, over the {} byte limit",
                bytes.len(),
                xml::MAX_DOCUMENT_BYTES
            ),
        ));
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(std::borrow::Cow::Borrowed(s)),
        Err(e) => {
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).to_ascii_lowercase();
            let decl = head.lines().next().unwrap_or("");
            let latin1 = decl.starts_with("<?xml")
                && ["iso-8859-1", "latin1", "latin-1", "iso_8859-1"]
                    .iter()
                    .any(|e| decl.contains(e));
            if latin1 {
                Ok(std::borrow::Cow::Owned(
                    bytes.iter().map(|&b| char::from(b)).collect(),
                ))
            } else {
                Err(Diagnostic::error(
                    Code::XmlMalformed,
                    format!(
                        "the document is not UTF-8 (invalid byte at offset {})",
                        e.valid_up_to()
                    ),
                ))
            }
        }
    }
}
