//! HX: the node/edge XML workflow dialect (seed 002). Not loaded yet: the
//! loader lands with issue 12.

use super::Loaded;
use crate::codes::Code;
use crate::diag::Diagnostic;

/// Load an HX document. Never panics; every problem is a diagnostic.
pub fn load(_source: &str) -> Loaded {
    Loaded::refused(Diagnostic::error(
        Code::BpmnNotDefinitions,
        "HX workflows are not supported by this build yet",
    ))
}
