//! Machines into nodes and flows: the top level and every branch
//! (`Parallel`) or item processor (`Map`) is a scope with a synthetic start
//! node; `Next`, `Default`, choice rules and catchers become flows, resolved
//! within their own scope (a transition out of a branch is refused).

use super::json::J;
use super::{states, Ctx};
use crate::codes::Code;
use crate::diag::Pos;
use crate::model::{
    BoundaryEvent, BoundaryTrigger, DataFlow, Dialect, Expr, Flow, FlowIx, FlowKind, Node, NodeIx,
    NodeKind, Process, StartTrigger,
};
use std::collections::{HashMap, HashSet};

/// The longest state name accepted (as in the States language).
pub const MAX_NAME: usize = 80;
/// The most states accepted in one document (all scopes).
pub const MAX_STATES: usize = 10_000;
/// The process id when the document has no `Name`.
pub const DEFAULT_ID: &str = "state-machine";

/// A transition to resolve once every state of its scope is known.
pub struct Pending {
    pub from: NodeIx,
    pub target: String,
    pub pos: Pos,
    pub condition: Option<Expr>,
    /// The Choice's `Default`.
    pub default: bool,
}

pub struct Builder<'c> {
    pub cx: &'c mut Ctx,
    pub nodes: Vec<Node>,
    pub flows: Vec<Flow>,
    /// Every state name, across scopes (names are unique in the whole machine).
    names: HashSet<String>,
    /// The top level's `QueryLanguage` is JSONata.
    pub jsonata: bool,
    /// Every variable an `Assign` names: its scope, name, position and state.
    pub assigns: Vec<(Option<NodeIx>, String, Pos, String)>,
}

impl Builder<'_> {
    pub fn node(
        &mut self,
        id: String,
        pos: Pos,
        scope: Option<NodeIx>,
        kind: NodeKind,
        data: Option<DataFlow>,
    ) -> NodeIx {
        let ix = NodeIx(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        self.nodes.push(Node {
            ix,
            id,
            name: None,
            pos,
            scope,
            kind,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            boundaries: Vec::new(),
            join: None,
            data: data.map(Box::new),
        });
        ix
    }

    pub fn flow(
        &mut self,
        source: NodeIx,
        target: NodeIx,
        pos: Pos,
        condition: Option<Expr>,
    ) -> FlowIx {
        let ix = FlowIx(u32::try_from(self.flows.len()).unwrap_or(u32::MAX));
        let id = format!(
            "{}->{}#{}",
            self.nodes[source.0 as usize].id, self.nodes[target.0 as usize].id, ix.0
        );
        self.flows.push(Flow {
            ix,
            id,
            pos,
            source,
            target,
            condition,
            kind: FlowKind::Sequence,
        });
        self.nodes[source.0 as usize].outgoing.push(ix);
        self.nodes[target.0 as usize].incoming.push(ix);
        ix
    }

    /// Attach an error catcher to `activity`.
    pub fn catcher(
        &mut self,
        activity: NodeIx,
        id: String,
        pos: Pos,
        codes: Option<Vec<String>>,
        data: DataFlow,
    ) -> NodeIx {
        let scope = self.nodes[activity.0 as usize].scope;
        let kind = NodeKind::Boundary(BoundaryEvent {
            attached_to: activity,
            interrupting: true,
            trigger: BoundaryTrigger::Error {
                codes,
                result_path: None,
                catch_failures: true,
            },
        });
        let b = self.node(id, pos, scope, kind, Some(data));
        self.nodes[activity.0 as usize].boundaries.push(b);
        b
    }

    /// Build one machine (the top level, a branch, an item processor) in
    /// `scope`. `owner` names it in synthetic ids; `extra` lists the fields
    /// its object may have besides `StartAt`, `States` and `Comment`.
    pub fn machine(&mut self, j: &J, scope: Option<NodeIx>, owner: &str, extra: &[&str]) {
        let Some(obj) = j.as_obj() else {
            self.cx.err(
                Code::StatesInvalidField,
                j.pos,
                owner,
                format!("a state machine must be an object, not {}", j.kind()),
            );
            return;
        };
        for (k, _) in obj {
            let known = matches!(k.name.as_str(), "StartAt" | "States" | "Comment")
                || extra.contains(&k.name.as_str());
            if !known {
                self.cx.err(
                    Code::StatesUnknownField,
                    k.pos,
                    owner,
                    format!("a state machine has no field `{}`", k.name),
                );
            }
        }
        let start_at = match j.get("StartAt") {
            Some(s) => match s.as_str() {
                Some(name) => Some((name.to_string(), s.pos)),
                None => {
                    self.cx.err(
                        Code::StatesInvalidField,
                        s.pos,
                        owner,
                        "`StartAt` must be a state name",
                    );
                    None
                }
            },
            None => {
                self.cx.err(
                    Code::StatesMissingField,
                    j.pos,
                    owner,
                    "a state machine needs `StartAt`",
                );
                None
            }
        };
        let states = match j.get("States") {
            Some(s) => match s.as_obj() {
                Some(o) if !o.is_empty() => o,
                _ => {
                    self.cx.err(
                        Code::StatesInvalidField,
                        s.pos,
                        owner,
                        "`States` must be an object with at least one state",
                    );
                    return;
                }
            },
            None => {
                self.cx.err(
                    Code::StatesMissingField,
                    j.pos,
                    owner,
                    "a state machine needs `States`",
                );
                return;
            }
        };
        let start_id = if owner.is_empty() {
            "#start".to_string()
        } else {
            format!("{owner}#start")
        };
        let start = self.node(
            start_id,
            j.pos,
            scope,
            NodeKind::Start(StartTrigger::None),
            Some(DataFlow::default()),
        );
        let mut local: HashMap<String, NodeIx> = HashMap::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut terminal = false;
        for (k, sj) in states {
            if k.name.is_empty() || k.name.chars().count() > MAX_NAME {
                self.cx.err(
                    Code::StatesInvalidField,
                    k.pos,
                    &k.name,
                    format!("a state name has 1 to {MAX_NAME} characters"),
                );
            }
            if !self.names.insert(k.name.clone()) {
                self.cx.err(
                    Code::StatesDuplicateState,
                    k.pos,
                    &k.name,
                    format!(
                        "the state name `{}` is used twice (names are unique in the whole machine)",
                        k.name
                    ),
                );
                continue;
            }
            if self.names.len() > MAX_STATES {
                self.cx.err(
                    Code::StatesLimitExceeded,
                    k.pos,
                    &k.name,
                    format!("more than {MAX_STATES} states"),
                );
                return;
            }
            if let Some(built) = states::state(self, &k.name, k.pos, sj, scope) {
                local.insert(k.name.clone(), built.node);
                terminal |= built.terminal;
                pending.extend(built.transitions);
            }
        }
        let mut edges: HashMap<NodeIx, Vec<NodeIx>> = HashMap::new();
        for p in pending {
            let Some(&target) = local.get(&p.target) else {
                let from = self.nodes[p.from.0 as usize].id.clone();
                self.cx.err(
                    Code::StatesUnknownState,
                    p.pos,
                    &from,
                    format!(
                        "`{}` names no state of this {}",
                        p.target,
                        scope_word(scope)
                    ),
                );
                continue;
            };
            let f = self.flow(p.from, target, p.pos, p.condition);
            edges
                .entry(state_of(&self.nodes, p.from))
                .or_default()
                .push(target);
            if p.default {
                if let NodeKind::ExclusiveGateway { default } =
                    &mut self.nodes[p.from.0 as usize].kind
                {
                    *default = Some(f);
                }
            }
        }
        if !terminal && !local.is_empty() {
            self.cx.err(
                Code::StatesNoTerminalState,
                j.pos,
                owner,
                format!(
                    "this {} has no terminal state (`End`, Succeed or Fail)",
                    scope_word(scope)
                ),
            );
        }
        let Some((first, pos)) = start_at else {
            return;
        };
        let Some(&first_ix) = local.get(&first) else {
            self.cx.err(
                Code::StatesUnknownState,
                pos,
                owner,
                format!(
                    "`StartAt` names `{first}`, no state of this {}",
                    scope_word(scope)
                ),
            );
            return;
        };
        self.flow(start, first_ix, pos, None);
        // Every state must be reachable from StartAt.
        let mut seen: HashSet<NodeIx> = HashSet::from([first_ix]);
        let mut stack = vec![first_ix];
        while let Some(n) = stack.pop() {
            for &t in edges.get(&n).into_iter().flatten() {
                if seen.insert(t) {
                    stack.push(t);
                }
            }
        }
        for (k, _) in states {
            if let Some(ix) = local.get(&k.name) {
                if !seen.contains(ix) {
                    self.cx.err(
                        Code::StatesUnreachableState,
                        k.pos,
                        &k.name,
                        format!("no transition reaches `{}`", k.name),
                    );
                }
            }
        }
    }
}

/// The state a transition's source belongs to (a catcher belongs to its activity).
/// A Parallel branch or Map iteration reads the variables of the scopes
/// around it but cannot assign them: an `Assign` inside one naming a
/// variable an enclosing scope assigns is refused, as Step Functions does.
fn outer_assignments(b: &mut Builder<'_>) {
    let enclosing = |nodes: &[Node], mut scope: Option<NodeIx>| {
        let mut out = Vec::new();
        while let Some(s) = scope {
            let n = &nodes[s.0 as usize];
            scope = n.scope;
            if matches!(n.kind, NodeKind::SubProcess) {
                // The branch's scope is the fan-out's; the one around it, the fan-out's own.
                out.push(scope.and_then(|f| nodes[f.0 as usize].scope));
            }
        }
        out
    };
    let mut refused = Vec::new();
    for (scope, name, pos, state) in &b.assigns {
        for outer in enclosing(&b.nodes, *scope) {
            if b.assigns.iter().any(|(s, n, ..)| *s == outer && n == name) {
                refused.push((*pos, state.clone(), name.clone()));
                break;
            }
        }
    }
    for (pos, state, name) in refused {
        b.cx.err(
            Code::StatesInvalidField,
            pos,
            &state,
            format!(
                "`Assign`: `{name}` is assigned in an enclosing scope; a Parallel branch or Map iteration reads outer variables but cannot assign them"
            ),
        );
    }
}

fn state_of(nodes: &[Node], ix: NodeIx) -> NodeIx {
    match &nodes[ix.0 as usize].kind {
        NodeKind::Boundary(b) => b.attached_to,
        _ => ix,
    }
}

fn scope_word(scope: Option<NodeIx>) -> &'static str {
    if scope.is_none() {
        "state machine"
    } else {
        "branch"
    }
}

/// Build the process of a document.
pub fn process(cx: &mut Ctx, root: &J) -> Option<Process> {
    let Some(obj) = root.as_obj() else {
        cx.err(
            Code::StatesNotAStateMachine,
            root.pos,
            "",
            format!("a state machine is a JSON object, not {}", root.kind()),
        );
        return None;
    };
    if root.get("StartAt").is_none() && root.get("States").is_none() {
        cx.err(
            Code::StatesNotAStateMachine,
            root.pos,
            "",
            "this JSON is not a state machine: it has neither `StartAt` nor `States`",
        );
        return None;
    }
    let mut id = DEFAULT_ID.to_string();
    let mut jsonata = false;
    for (k, v) in obj {
        match k.name.as_str() {
            "Version" if v.as_str().is_none() => {
                cx.err(Code::StatesInvalidField, v.pos, "", "`Version` must be a string");
            }
            "TimeoutSeconds" => cx.unsupported(k.pos, "", "a state machine `TimeoutSeconds`"),
            "QueryLanguage" => match v.as_str() {
                Some("JSONPath") => {}
                Some("JSONata") => jsonata = true,
                _ => cx.err(
                    Code::StatesInvalidField,
                    v.pos,
                    "",
                    "`QueryLanguage` is JSONPath or JSONata",
                ),
            },
            "Name" => match v.as_str() {
                Some(n)
                    if !n.is_empty()
                        && n.len() <= 128
                        && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')) =>
                {
                    id = n.to_string();
                }
                _ => cx.err(
                    Code::StatesInvalidField,
                    v.pos,
                    "",
                    "`Name` (Sutra's process id) has 1 to 128 of A-Z, a-z, 0-9, '.', '_', ':' and '-'",
                ),
            },
            _ => {}
        }
    }
    let mut b = Builder {
        cx,
        nodes: Vec::new(),
        flows: Vec::new(),
        names: HashSet::new(),
        jsonata,
        assigns: Vec::new(),
    };
    b.machine(
        root,
        None,
        "",
        &["Version", "TimeoutSeconds", "QueryLanguage", "Name"],
    );
    outer_assignments(&mut b);
    // Synthetic ids must not collide with state names.
    let mut ids = HashSet::new();
    for n in &b.nodes {
        if !ids.insert(n.id.as_str()) {
            b.cx.err(
                Code::StatesDuplicateState,
                n.pos,
                &n.id,
                format!(
                    "the state name `{}` collides with a name Sutra gives a catcher or branch",
                    n.id
                ),
            );
        }
    }
    let mut p = Process {
        id,
        name: None,
        executable: true,
        dialect: Dialect::Asl,
        pos: root.pos,
        nodes: b.nodes,
        flows: b.flows,
        business_key: None,
        by_id: HashMap::new(),
    };
    p.index();
    Some(p)
}
