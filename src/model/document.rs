//! Documents: the JSON value a token carries from node to node, and how a
//! node reads and rewrites it (the data flow of the States language, in
//! dialect-neutral terms).
//!
//! A node with a [`DataFlow`] works on its token's document instead of the
//! instance variables: its effective input is `input` then `parameters`; its
//! result goes through `result_selector`, is placed into the node's input at
//! `result_path`, and `output` selects what the next node receives.
//!
//! Invariants (established by the loaders): every [`DocPath`] parsed (a
//! reference path has only name and index steps); every [`Call`] names a known
//! [`Intrinsic`] with an argument count it accepts.

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// The root a path reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRoot {
    /// `$`: the document (or the node's effective input).
    Document,
    /// `$$`: the context object (execution, state, map item).
    Context,
    /// `$name`: the variables (`Assign`); the query's first step is the name.
    Variables,
}

/// One step of a reference path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Key(String),
    Index(i64),
}

/// A parsed JSONPath over a document or the context object. A reference path
/// (only name and index steps) names at most one place and can be written to;
/// any other path is a query whose matches are returned as an array.
#[derive(Clone)]
pub struct DocPath {
    /// As written in the definition.
    pub text: String,
    pub root: PathRoot,
    /// The steps of a reference path (`None` for a query).
    pub steps: Option<Vec<Step>>,
    /// The RFC 9535 query (relative to `root`).
    pub query: Arc<serde_json_path::JsonPath>,
}

impl DocPath {
    pub fn is_reference(&self) -> bool {
        self.steps.is_some()
    }
}

impl std::fmt::Debug for DocPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DocPath({:?})", self.text)
    }
}

impl Serialize for DocPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The intrinsic functions a template may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Intrinsic {
    Format,
    StringToJson,
    JsonToString,
    Array,
    ArrayPartition,
    ArrayContains,
    ArrayRange,
    ArrayGetItem,
    ArrayLength,
    ArrayUnique,
    Base64Encode,
    Base64Decode,
    Hash,
    JsonMerge,
    MathRandom,
    MathAdd,
    StringSplit,
    Uuid,
}

impl Intrinsic {
    pub const ALL: [Intrinsic; 18] = [
        Intrinsic::Format,
        Intrinsic::StringToJson,
        Intrinsic::JsonToString,
        Intrinsic::Array,
        Intrinsic::ArrayPartition,
        Intrinsic::ArrayContains,
        Intrinsic::ArrayRange,
        Intrinsic::ArrayGetItem,
        Intrinsic::ArrayLength,
        Intrinsic::ArrayUnique,
        Intrinsic::Base64Encode,
        Intrinsic::Base64Decode,
        Intrinsic::Hash,
        Intrinsic::JsonMerge,
        Intrinsic::MathRandom,
        Intrinsic::MathAdd,
        Intrinsic::StringSplit,
        Intrinsic::Uuid,
    ];

    /// The name as written (`States.Format`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Format => "States.Format",
            Intrinsic::StringToJson => "States.StringToJson",
            Intrinsic::JsonToString => "States.JsonToString",
            Intrinsic::Array => "States.Array",
            Intrinsic::ArrayPartition => "States.ArrayPartition",
            Intrinsic::ArrayContains => "States.ArrayContains",
            Intrinsic::ArrayRange => "States.ArrayRange",
            Intrinsic::ArrayGetItem => "States.ArrayGetItem",
            Intrinsic::ArrayLength => "States.ArrayLength",
            Intrinsic::ArrayUnique => "States.ArrayUnique",
            Intrinsic::Base64Encode => "States.Base64Encode",
            Intrinsic::Base64Decode => "States.Base64Decode",
            Intrinsic::Hash => "States.Hash",
            Intrinsic::JsonMerge => "States.JsonMerge",
            Intrinsic::MathRandom => "States.MathRandom",
            Intrinsic::MathAdd => "States.MathAdd",
            Intrinsic::StringSplit => "States.StringSplit",
            Intrinsic::Uuid => "States.UUID",
        }
    }

    pub fn parse(name: &str) -> Option<Intrinsic> {
        Intrinsic::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The argument counts it accepts (min, max; `None` = unbounded).
    pub fn arity(self) -> (usize, Option<usize>) {
        match self {
            Intrinsic::Format => (1, None),
            Intrinsic::Array => (0, None),
            Intrinsic::Uuid => (0, Some(0)),
            Intrinsic::StringToJson
            | Intrinsic::JsonToString
            | Intrinsic::ArrayLength
            | Intrinsic::ArrayUnique
            | Intrinsic::Base64Encode
            | Intrinsic::Base64Decode => (1, Some(1)),
            Intrinsic::ArrayPartition
            | Intrinsic::ArrayContains
            | Intrinsic::ArrayGetItem
            | Intrinsic::Hash
            | Intrinsic::MathAdd
            | Intrinsic::StringSplit => (2, Some(2)),
            Intrinsic::MathRandom => (2, Some(3)),
            Intrinsic::ArrayRange | Intrinsic::JsonMerge => (3, Some(3)),
        }
    }
}

/// An intrinsic function call.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    pub function: Intrinsic,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Arg {
    Literal(Value),
    Path(DocPath),
    Call(Call),
}

/// A value computed from the document: a path, an intrinsic call, or a
/// JSONata expression (which sees `$states` and the variables).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ValueExpr {
    Path(DocPath),
    Call(Call),
    Jsonata(super::Jsonata),
}

impl ValueExpr {
    /// The expression as written, for messages.
    pub fn text(&self) -> String {
        match self {
            ValueExpr::Path(p) => p.text.clone(),
            ValueExpr::Call(c) => c.function.name().to_string(),
            ValueExpr::Jsonata(j) => format!("{{% {} %}}", j.source()),
        }
    }
}

/// A payload template (`Parameters`, `ResultSelector`, ...): literal JSON
/// whose `key.$` entries are computed.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Template {
    Literal(Value),
    /// An object: keys (already stripped of `.$`) and their templates, in order.
    Object(Vec<(String, Template)>),
    Array(Vec<Template>),
    Computed(ValueExpr),
}

/// What a node passes on from a value: all of it, an empty object, or a selection.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Selection {
    #[default]
    Whole,
    /// `null`: an empty object.
    Empty,
    Path(DocPath),
}

/// Where a node's result goes in its input.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum ResultPath {
    /// `$`: the result replaces the input.
    #[default]
    Replace,
    /// `null`: the result is discarded; the input passes on.
    Discard,
    /// A reference path into the input.
    At(DocPath),
}

/// How a node reads and rewrites its token's document (see the module docs).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DataFlow {
    pub input: Selection,
    pub parameters: Option<Template>,
    pub result_selector: Option<Template>,
    pub result_path: ResultPath,
    pub output: Selection,
    /// A task failure raised under an engine code is renamed (`from` → `to`)
    /// before retriers and catchers see it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_names: Vec<(String, String)>,
    /// A name every task failure of this node also answers to, except one of
    /// class `timeout` (the States language's `States.TaskFailed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_failure_name: Option<String>,
    /// An error end's code and message computed from the input (`ErrorPath`, `CausePath`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ValueExpr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<ValueExpr>,
    /// The output computed from the node's input (`$states.input`) and its
    /// result (`$states.result`): JSONata's `Output`. When set it replaces
    /// the result selector, the result path and the output selection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_template: Option<Template>,
    /// Variables the node assigns when it completes (`Assign`): names and
    /// the templates of their values, evaluated with the variables as they
    /// were when the node was entered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assign: Option<Template>,
    /// The node evaluates JSONata (the runtime steps it off the executor).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub jsonata: bool,
}

impl DataFlow {
    /// The name a task failure with `code` is raised under.
    pub fn error_name<'a>(&'a self, code: &'a str) -> &'a str {
        self.error_names
            .iter()
            .find(|(from, _)| from == code)
            .map(|(_, to)| to.as_str())
            .unwrap_or(code)
    }
}

/// A timer whose due time comes from the document.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum TimerFrom {
    /// A number of seconds from now.
    Seconds(ValueExpr),
    /// An RFC 3339 timestamp.
    Timestamp(ValueExpr),
}
