//! Dialect loaders: text in, `model::Definitions` + diagnostics out. No dialect
//! leaks past here.
//!
//! [`load`] picks the loader by content, never by file name:
//! - a document whose first non-blank character is `{` is a States-language
//!   flow (`asl`; its loader refuses JSON without `StartAt` and `States`);
//! - an XML document whose root element's local name is `workflow` (any
//!   namespace or none) is HX (`hx`);
//! - any other document goes to the BPMN loader, which refuses what is not a
//!   BPMN `<definitions>` (`SUTRA.CONFIG.BPMN.NOT_DEFINITIONS`).
pub mod asl;
pub mod bpmn;
pub mod hx;
mod xml;

use crate::diag::Diagnostic;
use crate::model::Definitions;

/// The result of loading one definition document (any dialect).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub definitions: Definitions,
    pub diagnostics: Vec<Diagnostic>,
}

impl Loaded {
    /// No error diagnostics (infos and warnings allowed).
    pub fn ok(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The error diagnostics.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// A load that produced nothing but `d`.
    pub fn refused(d: Diagnostic) -> Loaded {
        Loaded {
            definitions: Definitions {
                processes: Vec::new(),
            },
            diagnostics: vec![d],
        }
    }
}

/// Which loader a document is for (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    Bpmn,
    Hx,
    Asl,
}

/// Decide the dialect of a document from its first bytes. Never panics.
pub fn sniff(source: &str) -> Sniffed {
    let s = source.trim_start_matches('\u{feff}').trim_start();
    if s.starts_with('{') {
        return Sniffed::Asl;
    }
    match root_local_name(s) {
        Some("workflow") => Sniffed::Hx,
        _ => Sniffed::Bpmn,
    }
}

/// The local name of the first element of an XML text, skipping the XML
/// declaration, processing instructions, comments and a doctype.
fn root_local_name(mut s: &str) -> Option<&str> {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix("<?") {
            s = &rest[rest.find("?>")? + 2..];
        } else if let Some(rest) = s.strip_prefix("<!--") {
            s = &rest[rest.find("-->")? + 3..];
        } else if let Some(rest) = s.strip_prefix("<!") {
            s = &rest[rest.find('>')? + 1..];
        } else if let Some(rest) = s.strip_prefix('<') {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
                .unwrap_or(rest.len());
            let name = &rest[..end];
            return Some(name.rsplit(':').next().unwrap_or(name));
        } else {
            return None;
        }
    }
}

/// Load a definition document of any dialect. Never panics; every problem is
/// a diagnostic, sorted by position.
pub fn load(source: &str) -> Loaded {
    match sniff(source) {
        Sniffed::Bpmn => bpmn::load(source),
        Sniffed::Hx => hx::load(source),
        Sniffed::Asl => asl::load(source),
    }
}

/// Load a document from bytes: UTF-8 (a BOM allowed), or ISO-8859-1 when an
/// XML declaration says so; anything else is refused with a diagnostic.
pub fn load_bytes(bytes: &[u8]) -> Loaded {
    match bpmn::decode(bytes) {
        Ok(text) => load(&text),
        Err(d) => Loaded::refused(d),
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_content() {
        assert_eq!(sniff("  {\"StartAt\": \"A\"}"), Sniffed::Asl);
        assert_eq!(
            sniff("<?xml version=\"1.0\"?>\n<!-- hi -->\n<hx:workflow id=\"w\"/>"),
            Sniffed::Hx
        );
        assert_eq!(sniff("<workflow>"), Sniffed::Hx);
        assert_eq!(sniff("<bpmn:definitions>"), Sniffed::Bpmn);
        assert_eq!(sniff("<workflowish/>"), Sniffed::Bpmn);
        assert_eq!(sniff(""), Sniffed::Bpmn);
        assert_eq!(sniff("<?xml"), Sniffed::Bpmn);
    }
}
