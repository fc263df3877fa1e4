//! HX: the node/edge XML workflow dialect (seed 002) → [`model::Definitions`].
//!
//! A document is HX when its root element's local name is `workflow` (any
//! namespace or none; its children must be in the root's namespace):
//!
//! ```xml
//! <workflow id="payment">
//!   <node id="reserve" type="task" impl="pay.reserve">
//!     <retry maxAttempts="4" backoff="exponential" initialDelay="PT1S" retryOn="transient"/>
//!     <timeout duration="PT30S" onTimeout="retry"/>
//!   </node>
//!   <node id="release" type="task" impl="pay.release" compensates="reserve"/>
//!   <node id="cool-off" type="wait" duration="PT1H"/>
//!   <node id="done" type="pass" join="any"/>
//!   <edges>
//!     <edge from="reserve" to="cool-off" when="amount > 100"/>
//!     <edge from="reserve" to="release" type="compensation"/>
//!   </edges>
//! </workflow>
//! ```
//!
//! Mapping to the IR (nothing past here knows the dialect):
//! - `task` → a registered service task (`impl` names the module); `<retry>`
//!   → one `RetryPolicy` (`retryOn` omitted = every class, so any failure is
//!   retried, as the seed says; `jitter` defaults to full); `<timeout>` → the
//!   attempt's `TaskTimeout`; `idempotent` (default `true`);
//! - `wait` → a timer catch (`duration` or `until`); `pass` → a no-op;
//! - every node gets a join rule (`join="all"` by default, or `"any"`), so it
//!   runs once all its incoming control, data and error edges are decided and
//!   is SKIPPED when all are dead (see `model::JoinRule`);
//! - `control` and `data` edges → sequence flows (`when` → the flow's
//!   condition, CEL); `error` → error flows; `compensation` → compensation flows;
//! - a synthetic start event `(start)` (not a valid HX id) has a flow to every
//!   entry node (one with no incoming control, data or error edge that is not
//!   a compensator): all entry nodes start at once.
//!
//! Invariants: [`load`] never panics; every problem is a diagnostic with a
//! stable code (`HX-*`, or the shared `SUTRA.CONFIG.XML.*` limits and
//! `SUTRA.CONFIG.CONDITION.SYNTAX`) and the line:column of the element; the IR
//! returned keeps the model invariants whatever the diagnostics (only a load
//! with [`Loaded::ok`] may run). Hostile XML is refused by the reader shared
//! with BPMN (`dialect::xml`: size, depth, element, attribute limits; no DTD).
//!
//! Modules: `parse` (elements → checked nodes and edges), `graph` (the graph
//! checks and the IR).

mod graph;
// The `http` node (issue 31).
mod http;
mod joins;
mod parse;

use super::xml;
use super::Loaded;
use crate::model::Definitions;

/// The id of the synthetic start event (parentheses never occur in an HX id).
pub const START_ID: &str = "(start)";

/// Load an HX document. Never panics; every problem is a diagnostic, sorted
/// by position.
pub fn load(source: &str) -> Loaded {
    let doc = match xml::parse(source) {
        Ok(doc) => doc,
        Err(d) => return Loaded::refused(d),
    };
    let mut diagnostics = Vec::new();
    let processes = match parse::workflow(&doc, &mut diagnostics) {
        Some(wf) => vec![graph::build(&wf, &mut diagnostics)],
        None => Vec::new(),
    };
    diagnostics.sort_by_key(|d| (d.line, d.column));
    Loaded {
        definitions: Definitions { processes },
        diagnostics,
    }
}

#[cfg(test)]
mod tests;
