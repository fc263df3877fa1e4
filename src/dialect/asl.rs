//! The States-language JSON dialect (seed 004). Not loaded yet: the loader
//! lands with issue 13.

use super::Loaded;
use crate::codes::Code;
use crate::diag::Diagnostic;

/// Load a States-language document. Never panics; every problem is a diagnostic.
pub fn load(_source: &str) -> Loaded {
    Loaded::refused(Diagnostic::error(
        Code::BpmnNotDefinitions,
        "States-language flows are not supported by this build yet",
    ))
}
