//! One state into IR nodes: its fields checked against its type, its data
//! flow, retriers and catchers, and the transitions it asks for.

use super::build::{Builder, Pending};
use super::json::{Jv, J};
use super::{jsonata, paths, rules};
use crate::codes::Code;
use crate::diag::Pos;
use crate::model::{
    CatchTrigger, DataFlow, EndKind, Expr, Fanout, MessageRef, NodeIx, NodeKind, OnTimeout,
    ResultPath, Selection, ServiceTask, TaskImpl, TaskTimeout, Template, TimerFrom, ValueExpr,
};
use crate::time::{IsoDuration, TimerSpec};

/// What building a state produced.
pub struct Built {
    pub node: NodeIx,
    pub transitions: Vec<Pending>,
    /// Ends its machine (`End`, Succeed, Fail).
    pub terminal: bool,
}

const IO: &[&str] = &["InputPath", "OutputPath"];
/// The fields only a JSONata state has.
const JSONATA_ONLY: &[&str] = &["Arguments", "Output", "Items"];
/// The state types that assign variables (`Assign`).
const ASSIGNING: &[&str] = &[
    "Task",
    "Pass",
    "Choice",
    "Wait",
    "Parallel",
    "Map",
    "InvokeFlow",
];

/// The fields each state type has (besides `Type`, `Comment`, `QueryLanguage`).
fn allowed(ty: &str) -> Option<&'static [&'static str]> {
    Some(match ty {
        "Task" => &[
            "Resource",
            "Next",
            "End",
            "Parameters",
            "ResultSelector",
            "ResultPath",
            "Retry",
            "Catch",
            "TimeoutSeconds",
        ],
        "Pass" => &["Next", "End", "Parameters", "Result", "ResultPath"],
        "Choice" => &["Choices", "Default"],
        "Wait" => &[
            "Next",
            "End",
            "Seconds",
            "SecondsPath",
            "Timestamp",
            "TimestampPath",
            "EventName",
            "ResultPath",
        ],
        "Succeed" => &[],
        "Fail" => &["Error", "ErrorPath", "Cause", "CausePath"],
        "Parallel" => &[
            "Branches",
            "Next",
            "End",
            "Parameters",
            "ResultSelector",
            "ResultPath",
            "Retry",
            "Catch",
        ],
        "Map" => &[
            "ItemProcessor",
            "Iterator",
            "ItemsPath",
            "ItemSelector",
            "Parameters",
            "MaxConcurrency",
            "MaxConcurrencyPath",
            "ToleratedFailureCount",
            "ToleratedFailureCountPath",
            "ToleratedFailurePercentage",
            "ToleratedFailurePercentagePath",
            "FailOnPartial",
            "Next",
            "End",
            "ResultSelector",
            "ResultPath",
            "Retry",
            "Catch",
        ],
        "InvokeFlow" => &[
            "Flow",
            "Next",
            "End",
            "Parameters",
            "ResultSelector",
            "ResultPath",
            "Retry",
            "Catch",
            "TimeoutSeconds",
        ],
        _ => return None,
    })
}

/// Fields Sutra knows but does not run, and the feature each names.
fn unsupported(ty: &str, field: &str) -> Option<&'static str> {
    Some(match (ty, field) {
        ("Task", "TimeoutSecondsPath") => "`TimeoutSecondsPath`",
        ("Task", "HeartbeatSeconds") | ("Task", "HeartbeatSecondsPath") => {
            "task heartbeats (`HeartbeatSeconds`)"
        }
        ("Task", "Credentials") => "`Credentials` (assumed roles)",
        ("Map", "ItemReader") => "distributed Map `ItemReader`",
        ("Map", "ItemBatcher") => "`ItemBatcher`",
        ("Map", "ResultWriter") => "distributed Map `ResultWriter`",
        ("Map", "Label") => "distributed Map `Label`",
        _ => return None,
    })
}

/// Build one state.
pub fn state(
    b: &mut Builder<'_>,
    name: &str,
    kpos: Pos,
    j: &J,
    scope: Option<NodeIx>,
) -> Option<Built> {
    let Some(obj) = j.as_obj() else {
        b.cx.err(
            Code::StatesInvalidField,
            j.pos,
            name,
            format!("a state must be an object, not {}", j.kind()),
        );
        return None;
    };
    let Some(ty_j) = j.get("Type") else {
        b.cx.err(Code::StatesMissingField, kpos, name, "a state needs `Type`");
        return None;
    };
    let ty = ty_j.as_str().unwrap_or_default();
    let Some(fields) = allowed(ty) else {
        b.cx.err(
            Code::StatesInvalidField,
            ty_j.pos,
            name,
            format!("`Type` is Task, Pass, Choice, Wait, Succeed, Fail, Parallel, Map or InvokeFlow, not {}", ty_j.to_value()),
        );
        return None;
    };
    // JSONata (this state's or the machine's QueryLanguage).
    let jsonata_state = match j.get("QueryLanguage") {
        Some(q) => match q.as_str() {
            Some("JSONata") => true,
            Some("JSONPath") => false,
            _ => {
                b.cx.err(
                    Code::StatesInvalidField,
                    q.pos,
                    name,
                    "`QueryLanguage` is JSONPath or JSONata",
                );
                false
            }
        },
        None => b.jsonata,
    };
    for (k, v) in obj {
        let f = k.name.as_str();
        if matches!(f, "Type" | "Comment" | "QueryLanguage") {
            continue;
        }
        if jsonata_state {
            jsonata::check(b.cx, v, name, f);
            if jsonata::JSONPATH_ONLY.contains(&f) {
                b.cx.err(
                    Code::StatesInvalidField,
                    k.pos,
                    name,
                    format!("`{f}` is a JSONPath field: a JSONata state does not have it"),
                );
                continue;
            }
            let has = match f {
                "Output" => ty != "Fail",
                "Arguments" => matches!(ty, "Task" | "Parallel" | "InvokeFlow"),
                "Items" | "ItemSelector" => ty == "Map",
                _ => false,
            };
            if has {
                continue;
            }
        }
        if fields.contains(&f) || (IO.contains(&f) && ty != "Fail") {
            continue;
        }
        if f == "Assign" && ASSIGNING.contains(&ty) {
            continue;
        }
        if !jsonata_state && JSONATA_ONLY.contains(&f) {
            b.cx.err(
                Code::StatesInvalidField,
                k.pos,
                name,
                format!("`{f}` is a JSONata field: this state's `QueryLanguage` is JSONPath"),
            );
            continue;
        }
        match unsupported(ty, f) {
            Some(feature) => b.cx.unsupported(k.pos, name, feature),
            None => b.cx.err(
                Code::StatesUnknownField,
                k.pos,
                name,
                format!("a {ty} state has no field `{f}`"),
            ),
        }
    }
    let mut s = St {
        b,
        name,
        j,
        scope,
        transitions: Vec::new(),
        jsonata: jsonata_state,
    };
    let (node, terminal) = match ty {
        "Task" => s.task(),
        "Pass" => s.pass(),
        "Choice" => s.choice(),
        "Wait" => s.wait(),
        "Succeed" => s.succeed(),
        "Fail" => s.fail(),
        "Parallel" => s.parallel(),
        "Map" => s.map(),
        _ => s.invoke_flow(),
    };
    Some(Built {
        node,
        transitions: s.transitions,
        terminal,
    })
}

pub(super) struct St<'a, 'b, 'c> {
    pub(super) b: &'a mut Builder<'c>,
    pub(super) name: &'b str,
    pub(super) j: &'b J,
    pub(super) scope: Option<NodeIx>,
    pub(super) transitions: Vec<Pending>,
    pub(super) jsonata: bool,
}

impl St<'_, '_, '_> {
    pub(super) fn err(&mut self, code: Code, pos: Pos, message: impl Into<String>) {
        self.b.cx.err(code, pos, self.name, message);
    }

    pub(super) fn get(&self, f: &str) -> Option<&J> {
        self.j.get(f)
    }

    /// At most one of `fields` (the first two found are reported).
    pub(super) fn exclusive(&mut self, fields: &[&'static str]) -> Option<(&'static str, J)> {
        exclusive_in(self.b.cx, self.name, self.j, fields)
    }

    pub(super) fn node(&mut self, kind: NodeKind, data: Option<DataFlow>) -> NodeIx {
        self.b
            .node(self.name.to_string(), self.j.pos, self.scope, kind, data)
    }

    /// `Next` or `End: true`: exactly one. Returns whether the state ends.
    pub(super) fn next_or_end(&mut self, node: NodeIx) -> bool {
        let next = self.get("Next").cloned();
        let end = self.get("End").cloned();
        let ends = match &end {
            Some(e) => match e.v {
                Jv::Bool(b) => b,
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        e.pos,
                        "`End` must be true or false",
                    );
                    false
                }
            },
            None => false,
        };
        match (next, ends) {
            (Some(n), true) => {
                self.err(
                    Code::StatesConflictingFields,
                    n.pos,
                    "a state has `Next` or `End`, not both",
                );
                true
            }
            (Some(n), false) => {
                match n.as_str() {
                    Some(t) => self.transitions.push(Pending {
                        from: node,
                        target: t.to_string(),
                        pos: n.pos,
                        condition: None,
                        default: false,
                    }),
                    None => self.err(
                        Code::StatesInvalidField,
                        n.pos,
                        "`Next` must be a state name",
                    ),
                }
                false
            }
            (None, true) => true,
            (None, false) => {
                self.err(
                    Code::StatesMissingField,
                    self.j.pos,
                    "this state needs `Next` or `End: true`",
                );
                false
            }
        }
    }

    pub(super) fn selection(&mut self, field: &str) -> Selection {
        if self.jsonata {
            return Selection::Whole;
        }
        match self.get(field).cloned() {
            None => Selection::Whole,
            Some(v) if v.is_null() => Selection::Empty,
            Some(v) => match self.b.cx.path_field(&v, self.name, field) {
                Some(p) => Selection::Path(p),
                None => Selection::Whole,
            },
        }
    }

    pub(super) fn result_path(&mut self, j: Option<&J>, default: ResultPath) -> ResultPath {
        let Some(v) = j.cloned() else {
            return default;
        };
        if self.jsonata {
            return default;
        }
        if v.is_null() {
            return ResultPath::Discard;
        }
        let Some(text) = v.as_str() else {
            self.err(
                Code::StatesInvalidField,
                v.pos,
                "`ResultPath` must be a path or null",
            );
            return default;
        };
        match paths::path(text) {
            Ok(p)
                if p.steps.as_deref() == Some(&[])
                    && p.root == crate::model::PathRoot::Document =>
            {
                ResultPath::Replace
            }
            Ok(p) if p.is_reference() && p.root == crate::model::PathRoot::Document => {
                ResultPath::At(p)
            }
            Ok(_) => {
                self.err(
                    Code::StatesInvalidPath,
                    v.pos,
                    format!("`ResultPath` `{text}` must be a reference path into the input (`$.a.b`, `$.a[0]`)"),
                );
                default
            }
            Err(paths::Refusal::Unsupported(m)) => {
                self.err(
                    Code::StatesInvalidPath,
                    v.pos,
                    format!("`ResultPath`: {m} in a result path"),
                );
                default
            }
            Err(r) => {
                self.b.cx.refusal(r, v.pos, self.name, "ResultPath");
                default
            }
        }
    }

    pub(super) fn template(&mut self, field: &str) -> Option<Template> {
        if self.jsonata {
            return None;
        }
        let j = self.get(field).cloned()?;
        super::paths::template(self.b.cx, &j, self.name, field, 0)
    }

    /// The common data flow: input, parameters, result selector, result path, output.
    pub(super) fn data(&mut self, result_default: ResultPath) -> DataFlow {
        let rp = self.get("ResultPath").cloned();
        let parameters = if self.jsonata {
            self.get("Arguments").map(jsonata::template)
        } else {
            self.template("Parameters")
        };
        let mut df = DataFlow {
            input: self.selection("InputPath"),
            parameters,
            result_selector: self.template("ResultSelector"),
            result_path: self.result_path(rp.as_ref(), result_default),
            output: self.selection("OutputPath"),
            ..DataFlow::default()
        };
        self.extras(&mut df);
        df
    }

    fn task(&mut self) -> (NodeIx, bool) {
        let resource = match self.get("Resource").cloned() {
            None => {
                self.err(
                    Code::StatesMissingField,
                    self.j.pos,
                    "a Task needs `Resource`",
                );
                String::new()
            }
            Some(r) => match &r.v {
                Jv::Str(s) => {
                    if let Err(why) = resource_syntax(s) {
                        self.err(
                            Code::StatesInvalidField,
                            r.pos,
                            format!("`Resource` {s:?}: {why}"),
                        );
                    }
                    s.clone()
                }
                Jv::Obj(_) => {
                    self.b.cx.unsupported(
                        r.pos,
                        self.name,
                        "a CloudFormation `Resource` object (`Ref`, `Fn::GetAtt`)",
                    );
                    String::new()
                }
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        r.pos,
                        "`Resource` must be a string",
                    );
                    String::new()
                }
            },
        };
        if let Some(c) = self.get("Credentials").cloned() {
            if c.as_obj().is_none() {
                self.err(
                    Code::StatesInvalidField,
                    c.pos,
                    "`Credentials` must be an object",
                );
            }
        }
        self.exclusive(&["TimeoutSeconds", "TimeoutSecondsPath"]);
        self.exclusive(&["HeartbeatSeconds", "HeartbeatSecondsPath"]);
        let timeout = match self.get("TimeoutSeconds").cloned() {
            Some(t) if self.literal_only(&t, "TimeoutSeconds") => self
                .positive_int(&t, "TimeoutSeconds")
                .map(|s| TaskTimeout {
                    duration: IsoDuration::from_secs(s),
                    on_timeout: OnTimeout::Retry,
                }),
            _ => None,
        };
        let mut data = self.data(ResultPath::Replace);
        data.error_names = vec![
            (
                Code::TaskFailed.as_str().into(),
                Code::ActionFailed.as_str().into(),
            ),
            (
                Code::TaskDeadlineExceeded.as_str().into(),
                Code::StatesTimeout.as_str().into(),
            ),
            (
                Code::TaskNotRegistered.as_str().into(),
                Code::ResourceNotFound.as_str().into(),
            ),
        ];
        data.task_failure_name = Some(Code::StatesTaskFailed.as_str().into());
        let retries = self.retriers();
        let implementation = if super::http::is_http(&resource) {
            self.http_task()
        } else {
            TaskImpl::Registered(resource)
        };
        let node = self.node(
            NodeKind::ServiceTask(ServiceTask {
                implementation,
                retries,
                timeout,
                idempotent: true,
                io: Default::default(),
            }),
            Some(data),
        );
        self.catchers(node);
        (node, self.next_or_end(node))
    }

    fn pass(&mut self) -> (NodeIx, bool) {
        let data = self.data(ResultPath::Replace);
        let set = self.get("Result").map(J::to_value);
        let node = self.node(NodeKind::Pass { set }, Some(data));
        (node, self.next_or_end(node))
    }

    fn choice(&mut self) -> (NodeIx, bool) {
        let mut data = DataFlow {
            input: self.selection("InputPath"),
            output: self.selection("OutputPath"),
            ..DataFlow::default()
        };
        self.extras(&mut data);
        let node = self.node(NodeKind::ExclusiveGateway { default: None }, Some(data));
        if self.get("Next").is_some() || self.get("End").is_some() {
            self.err(
                Code::StatesUnknownField,
                self.j.pos,
                "a Choice has no `Next` or `End`: its rules and `Default` name the next state",
            );
        }
        match self.get("Choices").cloned() {
            None => self.err(
                Code::StatesMissingField,
                self.j.pos,
                "a Choice needs `Choices`",
            ),
            Some(c) => match c.as_arr() {
                Some(items) if !items.is_empty() => {
                    for item in items {
                        let rule = if self.jsonata {
                            self.condition(item)
                        } else {
                            rules::rule(self.b.cx, item, self.name, true, 0).map(Expr::rule)
                        };
                        if let Some(next) = item
                            .get("Next")
                            .and_then(|n| n.as_str().map(|s| (s.to_string(), n.pos)))
                        {
                            self.transitions.push(Pending {
                                from: node,
                                target: next.0,
                                pos: next.1,
                                condition: rule,
                                default: false,
                            });
                        } else if self.jsonata {
                            self.err(
                                Code::StatesMissingField,
                                item.pos,
                                "a choice rule needs `Next`",
                            );
                        }
                    }
                }
                _ => self.err(
                    Code::StatesInvalidField,
                    c.pos,
                    "`Choices` must be a non-empty array of rules",
                ),
            },
        }
        if let Some(d) = self.get("Default").cloned() {
            match d.as_str() {
                Some(t) => self.transitions.push(Pending {
                    from: node,
                    target: t.to_string(),
                    pos: d.pos,
                    condition: None,
                    default: true,
                }),
                None => self.err(
                    Code::StatesInvalidField,
                    d.pos,
                    "`Default` must be a state name",
                ),
            }
        }
        (node, false)
    }

    fn wait(&mut self) -> (NodeIx, bool) {
        let rp = self.get("ResultPath").cloned();
        let mut data = DataFlow {
            input: self.selection("InputPath"),
            output: self.selection("OutputPath"),
            result_path: self.result_path(rp.as_ref(), ResultPath::Discard),
            ..DataFlow::default()
        };
        self.extras(&mut data);
        let how = self.exclusive(&[
            "Seconds",
            "SecondsPath",
            "Timestamp",
            "TimestampPath",
            "EventName",
        ]);
        let trigger = match how {
            None => {
                self.err(
                    Code::StatesMissingField,
                    self.j.pos,
                    "a Wait needs one of `Seconds`, `SecondsPath`, `Timestamp`, `TimestampPath` or `EventName`",
                );
                None
            }
            Some((f @ ("Seconds" | "Timestamp"), v))
                if self.jsonata && v.as_str().is_some_and(jsonata::is_expression) =>
            {
                let e = v.as_str().and_then(jsonata::lift).map(ValueExpr::Jsonata);
                e.map(|e| {
                    CatchTrigger::TimerFrom(if f == "Seconds" {
                        TimerFrom::Seconds(e)
                    } else {
                        TimerFrom::Timestamp(e)
                    })
                })
            }
            Some(("Seconds", v)) => self
                .non_negative_int(&v, "Seconds")
                .map(|s| CatchTrigger::Timer(TimerSpec::Duration(IsoDuration::from_secs(s)))),
            Some(("Timestamp", v)) => match v
                .as_str()
                // Step Functions wants a `T` between date and time (RFC 3339 allows a space).
                .filter(|s| matches!(s.as_bytes().get(10), Some(b'T' | b't')))
                .map(chrono::DateTime::parse_from_rfc3339)
            {
                Some(Ok(t)) => Some(CatchTrigger::Timer(TimerSpec::Date(t))),
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        "`Timestamp` must be an RFC 3339 timestamp",
                    );
                    None
                }
            },
            Some(("SecondsPath", v)) => self
                .b
                .cx
                .path_field(&v, self.name, "SecondsPath")
                .map(|p| CatchTrigger::TimerFrom(TimerFrom::Seconds(ValueExpr::Path(p)))),
            Some(("TimestampPath", v)) => self
                .b
                .cx
                .path_field(&v, self.name, "TimestampPath")
                .map(|p| CatchTrigger::TimerFrom(TimerFrom::Timestamp(ValueExpr::Path(p)))),
            Some((_, v)) => match v.as_str() {
                Some(e) if !e.is_empty() && e.len() <= 128 => {
                    Some(CatchTrigger::Message(MessageRef {
                        name: e.to_string(),
                        correlation_key: None,
                        event: true,
                    }))
                }
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        "`EventName` must be a name of 1 to 128 characters",
                    );
                    None
                }
            },
        };
        let kind = match trigger {
            Some(t) => NodeKind::Catch(t),
            None => NodeKind::Pass { set: None },
        };
        let node = self.node(kind, Some(data));
        (node, self.next_or_end(node))
    }

    fn succeed(&mut self) -> (NodeIx, bool) {
        let mut data = DataFlow {
            input: self.selection("InputPath"),
            output: self.selection("OutputPath"),
            ..DataFlow::default()
        };
        self.extras(&mut data);
        (self.node(NodeKind::End(EndKind::None), Some(data)), true)
    }

    fn fail(&mut self) -> (NodeIx, bool) {
        let mut texts = [None, None];
        let mut exprs = [None, None];
        for (i, (lit, path)) in [("Error", "ErrorPath"), ("Cause", "CausePath")]
            .into_iter()
            .enumerate()
        {
            match self.exclusive(&[lit, path]) {
                Some((f, v))
                    if f == lit
                        && self.jsonata
                        && v.as_str().is_some_and(jsonata::is_expression) =>
                {
                    exprs[i] = v.as_str().and_then(jsonata::lift).map(ValueExpr::Jsonata);
                }
                Some((f, v)) if f == lit => match v.as_str() {
                    Some(s) => texts[i] = Some(s.to_string()),
                    None => self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        format!("`{lit}` must be a string"),
                    ),
                },
                Some((_, v)) if !self.jsonata => match v.as_str() {
                    Some(s) => match paths::value_expr(s)
                        .and_then(|e| super::checks::expr(&e, self.b.cx.in_map).map(|()| e))
                    {
                        Ok(e) => exprs[i] = Some(e),
                        Err(r) => self.b.cx.refusal(r, v.pos, self.name, path),
                    },
                    None => self.err(
                        Code::StatesInvalidField,
                        v.pos,
                        format!("`{path}` must be a string"),
                    ),
                },
                _ => {}
            }
        }
        let [error, cause] = exprs;
        let [code, message] = texts;
        let data = DataFlow {
            error,
            cause,
            jsonata: self.jsonata,
            ..DataFlow::default()
        };
        let kind = NodeKind::End(EndKind::Error {
            code: code.unwrap_or_else(|| Code::StatesFail.as_str().to_string()),
            message,
        });
        (self.node(kind, Some(data)), true)
    }

    fn parallel(&mut self) -> (NodeIx, bool) {
        let data = self.data(ResultPath::Replace);
        let retries = self.retriers();
        let node = self.node(
            NodeKind::Fanout(Fanout {
                branches: Vec::new(),
                items: None,
                retries,
                repeat: None,
            }),
            Some(data),
        );
        let mut branches = Vec::new();
        match self.get("Branches").cloned() {
            None => self.err(
                Code::StatesMissingField,
                self.j.pos,
                "a Parallel needs `Branches`",
            ),
            Some(bj) => match bj.as_arr() {
                Some(items) if !items.is_empty() => {
                    for (i, item) in items.iter().enumerate() {
                        let owner = format!("{}#branch{}", self.name, i + 1);
                        let scope = self.b.node(
                            owner.clone(),
                            item.pos,
                            Some(node),
                            NodeKind::SubProcess,
                            None,
                        );
                        branches.push(scope);
                        self.b
                            .machine(item, Some(scope), &owner, &["QueryLanguage"]);
                    }
                }
                _ => self.err(
                    Code::StatesInvalidField,
                    bj.pos,
                    "`Branches` must be a non-empty array of state machines",
                ),
            },
        }
        if let NodeKind::Fanout(f) = &mut self.b.nodes[node.0 as usize].kind {
            f.branches = branches;
        }
        self.catchers(node);
        (node, self.next_or_end(node))
    }

    fn invoke_flow(&mut self) -> (NodeIx, bool) {
        let process = match self.get("Flow").cloned() {
            Some(f) => match f.as_str() {
                Some(s) if !s.is_empty() => s.to_string(),
                _ => {
                    self.err(
                        Code::StatesInvalidField,
                        f.pos,
                        "`Flow` must name a deployed flow",
                    );
                    String::new()
                }
            },
            None => {
                self.err(
                    Code::StatesMissingField,
                    self.j.pos,
                    "an InvokeFlow needs `Flow`",
                );
                String::new()
            }
        };
        let timeout = match self.get("TimeoutSeconds").cloned() {
            Some(t) if self.literal_only(&t, "TimeoutSeconds") => self
                .positive_int(&t, "TimeoutSeconds")
                .map(IsoDuration::from_secs),
            _ => None,
        };
        let mut data = self.data(ResultPath::Replace);
        data.error_names = vec![(
            Code::ChildTimeout.as_str().into(),
            Code::StatesTimeout.as_str().into(),
        )];
        data.task_failure_name = Some(Code::StatesTaskFailed.as_str().into());
        let retries = self.retriers();
        let node = self.node(
            NodeKind::CallProcess {
                process,
                retries,
                timeout,
                version: None,
                io: Default::default(),
                business_errors: false,
            },
            Some(data),
        );
        self.catchers(node);
        (node, self.next_or_end(node))
    }

    pub(super) fn positive_int(&mut self, v: &J, field: &str) -> Option<u64> {
        match v.to_value().as_u64() {
            Some(n) if (1..=99_999_999).contains(&n) => Some(n),
            _ => {
                self.err(
                    Code::StatesInvalidField,
                    v.pos,
                    format!("`{field}` must be a positive integer"),
                );
                None
            }
        }
    }

    pub(super) fn non_negative_int(&mut self, v: &J, field: &str) -> Option<u64> {
        match v.to_value().as_u64() {
            Some(n) if n <= 99_999_999 => Some(n),
            _ => {
                self.err(
                    Code::StatesInvalidField,
                    v.pos,
                    format!("`{field}` must be a non-negative integer"),
                );
                None
            }
        }
    }
}

/// At most one of `fields` in `j` (the first two found are reported).
pub(super) fn exclusive_in(
    cx: &mut super::Ctx,
    name: &str,
    j: &J,
    fields: &[&'static str],
) -> Option<(&'static str, J)> {
    let present: Vec<(&'static str, J)> = fields
        .iter()
        .filter_map(|f| j.get(f).map(|v| (*f, v.clone())))
        .collect();
    if present.len() > 1 {
        cx.err(
            Code::StatesConflictingFields,
            present[1].1.pos,
            name,
            format!(
                "`{}` and `{}` exclude each other",
                present[0].0, present[1].0
            ),
        );
    }
    present.into_iter().next()
}

/// A `Resource` string: a module name or an ARN, with optional `${...}`
/// substitutions; no empty trailing segment and no stray characters.
fn resource_syntax(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 2048 {
        return Err("must have 1 to 2048 characters");
    }
    if s.ends_with(':') {
        return Err("ends with an empty segment");
    }
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' if chars.peek() == Some(&'{') => {
                chars.next();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    if !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':')) {
                        return Err("has a malformed `${...}` substitution");
                    }
                }
                if !closed {
                    return Err("has an unclosed `${` substitution");
                }
            }
            '$' => {
                if !chars.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                    return Err("has a stray `$`");
                }
            }
            c if c.is_ascii_alphanumeric()
                || matches!(c, '-' | '_' | '.' | ':' | '/' | '@' | '+' | '=' | ',') => {}
            _ => return Err(
                "has a character that is neither a letter, a digit nor one of - _ . : / @ + = ,",
            ),
        }
    }
    Ok(())
}
