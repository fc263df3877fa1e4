//! A small XML reader for untrusted definition files: quick-xml's `NsReader`
//! turned into an owned element tree, every element carrying its resolved
//! namespace and its 1-based line and column.
//!
//! Invariants:
//! - hostile input is refused with a code, in time and memory linear in the
//!   input: a DTD or entity declaration is `SUTRA.CONFIG.XML.DTD_FORBIDDEN`;
//!   going over one of the `MAX_*` limits below is
//!   `SUTRA.CONFIG.XML.LIMIT_EXCEEDED`; anything not well-formed (including an
//!   unbound namespace prefix, a duplicate attribute, an unclosed element) is
//!   `SUTRA.CONFIG.XML.MALFORMED` with the position of the fault;
//! - only the five predefined entities and numeric character references are
//!   ever expanded (there is no way to declare another one: DTDs are refused);
//! - text is kept, concatenated, on the element that contains it; a
//!   whitespace-only run before any other text (indentation) is dropped.
//!
//! Positions come from the reader's byte offset before each event, turned into
//! line:column by a forward-only cursor (columns count characters, not bytes).
//! The cursor replaces a line-start table: a hostile file of 16 MiB of
//! newlines would make such a table 128 MiB.

use crate::codes::Code;
use crate::diag::{Diagnostic, Pos};
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;
use std::collections::HashSet;

/// The largest document accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;
/// The deepest element nesting accepted.
pub const MAX_DEPTH: usize = 256;
/// The longest attribute value, or text content of one element, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The most elements one document may hold.
pub const MAX_ELEMENTS: usize = 100_000;
/// The most attributes (namespace declarations included) on one element.
pub const MAX_ATTRIBUTES: usize = 256;
/// The most namespace declarations in scope at once (bounds prefix lookups).
pub const MAX_NS_IN_SCOPE: usize = 256;

/// The BPMN 2.0 model namespace.
pub const BPMN_NS: &str = "http://www.omg.org/spec/BPMN/20100524/MODEL";
/// Sutra's extension namespace (`q:`).
pub const Q_NS: &str = "https://sutra.dev/bpmn/q/1.0";
const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";
const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// The namespace of an element or attribute name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    /// No namespace (an unprefixed attribute, or an element with no default namespace).
    None,
    Bpmn,
    Q,
    /// XML Schema instance (`xsi:type`): structural, never an extension.
    Xsi,
    /// The `xml:` namespace (`xml:lang`): structural, never an extension.
    Xml,
    /// Any other namespace: an index into [`Document::namespaces`].
    Other(u32),
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub ns: Ns,
    /// The name as written, prefix included (for messages).
    pub qname: String,
    pub local: String,
    pub value: String,
}

#[derive(Debug, Clone)]
pub struct Element {
    pub ns: Ns,
    /// The name as written, prefix included (for messages).
    pub qname: String,
    pub local: String,
    pub attrs: Vec<Attr>,
    pub children: Vec<Element>,
    /// The element's own text (CDATA included), whitespace-only runs dropped.
    pub text: String,
    pub pos: Pos,
}

impl Element {
    /// An attribute in no namespace (how BPMN writes its own attributes).
    pub fn attr(&self, local: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|a| a.ns == Ns::None && a.local == local)
            .map(|a| a.value.as_str())
    }

    pub fn id(&self) -> Option<&str> {
        self.attr("id")
    }

    /// The id, or lacking one the tag as written: how diagnostics name an element.
    pub fn label(&self) -> &str {
        self.id().unwrap_or(&self.qname)
    }

    pub fn is(&self, ns: Ns, local: &str) -> bool {
        self.ns == ns && self.local == local
    }

    /// Children in the BPMN namespace.
    pub fn bpmn_children(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter(|c| c.ns == Ns::Bpmn)
    }

    /// The first BPMN child with this local name.
    pub fn bpmn_child(&self, local: &str) -> Option<&Element> {
        self.bpmn_children().find(|c| c.local == local)
    }
}

#[derive(Debug, Clone)]
pub struct Document {
    pub root: Element,
    /// The URIs behind [`Ns::Other`].
    pub namespaces: Vec<String>,
}

impl Document {
    pub fn namespace_uri(&self, ns: Ns) -> &str {
        match ns {
            Ns::None => "",
            Ns::Bpmn => BPMN_NS,
            Ns::Q => Q_NS,
            Ns::Xsi => XSI_NS,
            Ns::Xml => XML_NS,
            Ns::Other(i) => self
                .namespaces
                .get(i as usize)
                .map(String::as_str)
                .unwrap_or(""),
        }
    }
}

/// Forward-only byte offset → line:column conversion (see the module docs).
struct Locator<'a> {
    src: &'a [u8],
    offset: usize,
    line: u32,
    column: u32,
}

impl<'a> Locator<'a> {
    fn new(src: &'a str) -> Self {
        Locator {
            src: src.as_bytes(),
            offset: 0,
            line: 1,
            column: 1,
        }
    }

    fn pos(&mut self, offset: u64) -> Pos {
        let target = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.src.len());
        if target < self.offset {
            // Only error positions go backwards, and only once: start over.
            self.offset = 0;
            self.line = 1;
            self.column = 1;
        }
        for &b in &self.src[self.offset..target] {
            if b == b'\n' {
                self.line = self.line.saturating_add(1);
                self.column = 1;
            } else if b & 0xC0 != 0x80 {
                // Count characters: skip UTF-8 continuation bytes.
                self.column = self.column.saturating_add(1);
            }
        }
        self.offset = target;
        Pos {
            line: self.line,
            column: self.column,
        }
    }
}

fn malformed(message: impl Into<String>, pos: Pos) -> Diagnostic {
    Diagnostic::error(Code::XmlMalformed, message).at(pos)
}

fn limit(message: impl Into<String>, pos: Pos) -> Diagnostic {
    Diagnostic::error(Code::XmlLimitExceeded, message).at(pos)
}

/// Interns namespace URIs into [`Ns`] values.
#[derive(Default)]
struct Namespaces {
    uris: Vec<String>,
}

impl Namespaces {
    fn intern(&mut self, uri: &[u8]) -> Ns {
        let uri = String::from_utf8_lossy(uri);
        match uri.as_ref() {
            BPMN_NS => Ns::Bpmn,
            Q_NS => Ns::Q,
            XSI_NS => Ns::Xsi,
            XML_NS => Ns::Xml,
            other => match self.uris.iter().position(|u| u == other) {
                Some(i) => Ns::Other(i as u32),
                None => {
                    self.uris.push(other.to_string());
                    Ns::Other((self.uris.len() - 1) as u32)
                }
            },
        }
    }

    fn resolve(&mut self, r: ResolveResult<'_>, qname: &str, pos: Pos) -> Result<Ns, Diagnostic> {
        match r {
            ResolveResult::Unbound => Ok(Ns::None),
            ResolveResult::Bound(ns) => Ok(self.intern(ns.as_ref())),
            ResolveResult::Unknown(prefix) => Err(malformed(
                format!(
                    "namespace prefix `{}` of `{qname}` is not declared",
                    String::from_utf8_lossy(&prefix)
                ),
                pos,
            )),
        }
    }
}

/// One open element and how many namespace declarations it made.
struct Open {
    element: Element,
    ns_decls: usize,
}

struct Parser<'a> {
    reader: NsReader<&'a [u8]>,
    locator: Locator<'a>,
    namespaces: Namespaces,
    stack: Vec<Open>,
    ns_in_scope: usize,
    elements: usize,
    root: Option<Element>,
}

/// Parse a document into an element tree, or refuse it with one diagnostic.
pub fn parse(source: &str) -> Result<Document, Diagnostic> {
    if source.len() > MAX_DOCUMENT_BYTES {
        return Err(Diagnostic::error(
            Code::XmlLimitExceeded,
            format!(
                "document is {} bytes, over the {} byte limit",
                source.len(),
                MAX_DOCUMENT_BYTES
            ),
        ));
    }
    // A byte-order mark is not content; positions are counted after it.
    let body = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut parser = Parser {
        reader: NsReader::from_reader(body.as_bytes()),
        locator: Locator::new(body),
        namespaces: Namespaces::default(),
        stack: Vec::new(),
        ns_in_scope: 0,
        elements: 0,
        root: None,
    };
    parser.run()?;
    match parser.root {
        Some(root) => Ok(Document {
            root,
            namespaces: parser.namespaces.uris,
        }),
        None => Err(Diagnostic::error(
            Code::XmlMalformed,
            "document has no root element",
        )),
    }
}

impl<'a> Parser<'a> {
    fn run(&mut self) -> Result<(), Diagnostic> {
        loop {
            let at = self.reader.buffer_position();
            let (ns, event) = match self.reader.read_resolved_event() {
                Ok((resolved, event)) => {
                    let pos = self.locator.pos(at);
                    let ns = match &event {
                        Event::Start(e) | Event::Empty(e) => {
                            let qname = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                            Some(self.namespaces.resolve(resolved, &qname, pos)?)
                        }
                        _ => None,
                    };
                    (ns, (event, pos))
                }
                Err(e) => {
                    let pos = self.locator.pos(self.reader.error_position());
                    return Err(malformed(format!("not well-formed XML: {e}"), pos));
                }
            };
            let event = match (ns, event) {
                (Some(ns), (Event::Start(e), pos)) => {
                    let el = self.open(ns, &e, pos)?;
                    self.push(el, pos)?;
                    continue;
                }
                (Some(ns), (Event::Empty(e), pos)) => {
                    let el = self.open(ns, &e, pos)?;
                    self.pop_ns(el.1);
                    self.attach(el.0, pos)?;
                    continue;
                }
                (_, other) => other,
            };
            let (event, pos) = event;
            match event {
                Event::End(_) => {
                    let Some(open) = self.stack.pop() else {
                        return Err(malformed("unexpected closing tag", pos));
                    };
                    self.ns_in_scope = self.ns_in_scope.saturating_sub(open.ns_decls);
                    self.attach(open.element, pos)?;
                }
                Event::Text(t) => {
                    let text = t
                        .xml_content()
                        .map_err(|e| malformed(format!("bad text: {e}"), pos))?;
                    self.text(&text, pos)?;
                }
                Event::CData(t) => {
                    let text = t
                        .decode()
                        .map_err(|e| malformed(format!("bad CDATA: {e}"), pos))?;
                    self.text(&text, pos)?;
                }
                Event::GeneralRef(r) => {
                    let resolved = match r.resolve_char_ref() {
                        Ok(Some(c)) => c.to_string(),
                        Ok(None) => {
                            let name = r.decode().map_err(|e| {
                                malformed(format!("bad entity reference: {e}"), pos)
                            })?;
                            match quick_xml::escape::resolve_predefined_entity(&name) {
                                Some(s) => s.to_string(),
                                None => {
                                    return Err(malformed(
                                        format!("reference to undeclared entity `&{name};`"),
                                        pos,
                                    ))
                                }
                            }
                        }
                        Err(e) => {
                            return Err(malformed(format!("bad character reference: {e}"), pos))
                        }
                    };
                    self.text(&resolved, pos)?;
                }
                Event::DocType(_) => {
                    return Err(Diagnostic::error(
                        Code::XmlDtdForbidden,
                        "a DOCTYPE (DTD, entity declarations) is not accepted in a definition file",
                    )
                    .at(pos))
                }
                Event::Eof => {
                    if let Some(open) = self.stack.last() {
                        return Err(malformed(
                            format!(
                                "document ends inside `<{}>` opened at {}:{}",
                                open.element.qname, open.element.pos.line, open.element.pos.column
                            ),
                            pos,
                        ));
                    }
                    return Ok(());
                }
                Event::Comment(_) | Event::Decl(_) | Event::PI(_) => {}
                // `Start`/`Empty` were handled above.
                Event::Start(_) | Event::Empty(_) => {}
            }
        }
    }

    /// Build an element from a start tag; returns it and its count of namespace declarations.
    fn open(
        &mut self,
        ns: Ns,
        e: &BytesStart<'_>,
        pos: Pos,
    ) -> Result<(Element, usize), Diagnostic> {
        self.elements += 1;
        if self.elements > MAX_ELEMENTS {
            return Err(limit(format!("more than {MAX_ELEMENTS} elements"), pos));
        }
        let qname = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        let local = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
        let mut attrs = Vec::new();
        let mut seen = HashSet::new();
        let mut ns_decls = 0usize;
        let mut count = 0usize;
        for a in e.attributes().with_checks(false) {
            count += 1;
            if count > MAX_ATTRIBUTES {
                return Err(limit(
                    format!("element `<{qname}>` has more than {MAX_ATTRIBUTES} attributes"),
                    pos,
                ));
            }
            let a =
                a.map_err(|err| malformed(format!("bad attribute on `<{qname}>`: {err}"), pos))?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            if a.value.len() > MAX_VALUE_BYTES {
                return Err(limit(
                    format!(
                        "attribute `{key}` on `<{qname}>` is {} bytes, over the {MAX_VALUE_BYTES} byte limit",
                        a.value.len()
                    ),
                    pos,
                ));
            }
            if !seen.insert(key.clone()) {
                return Err(malformed(
                    format!("attribute `{key}` repeated on `<{qname}>`"),
                    pos,
                ));
            }
            if a.key.as_namespace_binding().is_some() {
                ns_decls += 1;
                continue;
            }
            let (res, local_name) = self.reader.resolve_attribute(a.key);
            let attr_local = String::from_utf8_lossy(local_name.as_ref()).into_owned();
            let attr_ns = self.namespaces.resolve(res, &key, pos)?;
            let value = a
                .unescape_value()
                .map_err(|err| {
                    malformed(
                        format!("bad value of attribute `{key}` on `<{qname}>`: {err}"),
                        pos,
                    )
                })?
                .into_owned();
            attrs.push(Attr {
                ns: attr_ns,
                qname: key,
                local: attr_local,
                value,
            });
        }
        if self.ns_in_scope + ns_decls > MAX_NS_IN_SCOPE {
            return Err(limit(
                format!("more than {MAX_NS_IN_SCOPE} namespace declarations in scope"),
                pos,
            ));
        }
        self.ns_in_scope += ns_decls;
        let element = Element {
            ns,
            qname,
            local,
            attrs,
            children: Vec::new(),
            text: String::new(),
            pos,
        };
        Ok((element, ns_decls))
    }

    fn pop_ns(&mut self, ns_decls: usize) {
        self.ns_in_scope = self.ns_in_scope.saturating_sub(ns_decls);
    }

    fn push(&mut self, (element, ns_decls): (Element, usize), pos: Pos) -> Result<(), Diagnostic> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(limit(
                format!("elements nested deeper than {MAX_DEPTH} levels"),
                pos,
            ));
        }
        if self.stack.is_empty() && self.root.is_some() {
            return Err(malformed("a second root element", pos));
        }
        self.stack.push(Open { element, ns_decls });
        Ok(())
    }

    fn attach(&mut self, element: Element, pos: Pos) -> Result<(), Diagnostic> {
        match self.stack.last_mut() {
            Some(parent) => parent.element.children.push(element),
            None if self.root.is_none() => self.root = Some(element),
            None => return Err(malformed("a second root element", pos)),
        }
        Ok(())
    }

    fn text(&mut self, text: &str, pos: Pos) -> Result<(), Diagnostic> {
        if text.len() > MAX_VALUE_BYTES {
            return Err(limit(
                format!(
                    "a text run of {} bytes, over the {MAX_VALUE_BYTES} byte limit",
                    text.len()
                ),
                pos,
            ));
        }
        let blank = text.trim().is_empty();
        match self.stack.last_mut() {
            Some(open) => {
                if blank && !text.is_empty() && open.element.text.is_empty() {
                    return Ok(());
                }
                let el = &mut open.element;
                if el.text.len() + text.len() > MAX_VALUE_BYTES {
                    return Err(limit(
                        format!(
                            "text of `<{}>` over the {MAX_VALUE_BYTES} byte limit",
                            el.qname
                        ),
                        pos,
                    ));
                }
                el.text.push_str(text);
                Ok(())
            }
            None if blank => Ok(()),
            None => Err(malformed("text outside the root element", pos)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_namespaces_whatever_the_prefix() {
        let doc = parse(&format!(
            r#"<x:definitions xmlns:x="{BPMN_NS}" xmlns:q="{Q_NS}"><process xmlns="{BPMN_NS}" id="p"><q:retry a="1"/></process></x:definitions>"#
        ))
        .unwrap();
        assert!(doc.root.is(Ns::Bpmn, "definitions"));
        let p = &doc.root.children[0];
        assert!(p.is(Ns::Bpmn, "process"));
        assert_eq!(p.id(), Some("p"));
        assert!(p.children[0].is(Ns::Q, "retry"));
        assert_eq!(p.children[0].attr("a"), Some("1"));
    }

    #[test]
    fn positions_are_line_and_character_column() {
        let doc = parse("<a>\n  <b/>\n\t<é/><c/>\n</a>").unwrap();
        let pos: Vec<(u32, u32)> = doc
            .root
            .children
            .iter()
            .map(|c| (c.pos.line, c.pos.column))
            .collect();
        assert_eq!(pos, vec![(2, 3), (3, 2), (3, 6)]);
        assert_eq!((doc.root.pos.line, doc.root.pos.column), (1, 1));
    }

    #[test]
    fn predefined_and_numeric_references_expand_in_text_and_attributes() {
        let doc = parse(r#"<a v="&lt;&#65;&amp;">x &gt; &#x42; y</a>"#).unwrap();
        assert_eq!(doc.root.attr("v"), Some("<A&"));
        assert_eq!(doc.root.text, "x > B y");
    }

    #[test]
    fn undeclared_entities_and_dtds_are_refused() {
        assert_eq!(parse("<a>&lol;</a>").unwrap_err().code, Code::XmlMalformed);
        assert_eq!(
            parse(r#"<a v="&lol;"/>"#).unwrap_err().code,
            Code::XmlMalformed
        );
        let d = parse("<?xml version=\"1.0\"?>\n<!DOCTYPE a [<!ENTITY x \"y\">]>\n<a>&x;</a>")
            .unwrap_err();
        assert_eq!((d.code, d.line), (Code::XmlDtdForbidden, 2));
    }

    #[test]
    fn malformed_documents_are_refused_with_a_position() {
        for bad in [
            "",
            "<a>",
            "<a></b>",
            "<a/><b/>",
            "text",
            "<a x='1' x='2'/>",
            "<p:a/>",
            "<a>\n<b></a>",
        ] {
            let d = parse(bad).unwrap_err();
            assert_eq!(d.code, Code::XmlMalformed, "{bad:?}: {d}");
        }
        let d = parse("<a>\n  <b>\n</a>").unwrap_err();
        assert_eq!(d.line, 3, "{d}");
    }

    #[test]
    fn limits_are_enforced() {
        let deep = "<a>".repeat(MAX_DEPTH + 1) + &"</a>".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(&deep).unwrap_err().code, Code::XmlLimitExceeded);
        let long = format!("<a v=\"{}\"/>", "x".repeat(MAX_VALUE_BYTES + 1));
        assert_eq!(parse(&long).unwrap_err().code, Code::XmlLimitExceeded);
        let many = format!("<a>{}</a>", "<b/>".repeat(MAX_ELEMENTS));
        assert_eq!(parse(&many).unwrap_err().code, Code::XmlLimitExceeded);
        let attrs: String = (0..=MAX_ATTRIBUTES)
            .map(|i| format!(" a{i}=\"\""))
            .collect();
        assert_eq!(
            parse(&format!("<a{attrs}/>")).unwrap_err().code,
            Code::XmlLimitExceeded
        );
    }

    #[test]
    fn whitespace_runs_are_dropped_and_bom_is_skipped() {
        let doc = parse("\u{feff}<a>\n  <b> x </b>\n</a>").unwrap();
        assert_eq!(doc.root.text, "");
        assert_eq!(doc.root.children[0].text, " x ");
        assert_eq!(doc.root.pos, Pos { line: 1, column: 1 });
    }
}
