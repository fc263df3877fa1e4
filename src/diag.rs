//! Load-time diagnostics: what every dialect loader reports.
//!
//! Every diagnostic carries a stable [`Code`], a message, and the 1-based
//! line and column of the element it is about (0 when there is no position,
//! e.g. for a whole-file problem).

use crate::codes::Code;
use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub line: u32,
    pub column: u32,
    /// The id (or, lacking one, the tag name) of the element concerned.
    pub element: Option<String>,
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            line: 0,
            column: 0,
            element: None,
        }
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn info(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Info,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn at(mut self, pos: Pos) -> Self {
        self.line = pos.line;
        self.column = pos.column;
        self
    }

    pub fn element(mut self, element: impl Into<String>) -> Self {
        self.element = Some(element.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// A 1-based position in a source document.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Diagnostic {
    /// `line:col: severity[CODE]: message` (the file name is the caller's to prefix).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}[{}]: {}",
            self.line,
            self.column,
            self.severity.as_str(),
            self.code,
            self.message
        )
    }
}
