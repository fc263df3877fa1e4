//! The intermediate representation (IR): the only process representation the
//! engine sees. Every dialect loader (`dialect::bpmn`, later `hx`, `asl`)
//! produces a [`Process`]; nothing past the loaders knows which dialect a
//! process came from.
//!
//! Invariants (established by the loaders, relied on by the engine):
//! - `nodes[i].ix == NodeIx(i)` and `flows[i].ix == FlowIx(i)`; every
//!   `NodeIx`/`FlowIx` stored anywhere in a `Process` is in bounds;
//! - `Node::incoming`/`outgoing` list exactly the flows whose target/source it is;
//! - a boundary event's `attached_to` is an activity (task or sub-process,
//!   or a receive task: a message `Catch`) in the same scope, and appears in
//!   that activity's `boundaries`;
//! - every condition parsed (a syntax error never reaches the engine).

mod document;
mod expr;
mod expr_cost;
mod expr_static;
mod http;
mod jsonata;
mod policy;
mod repeat;
mod rule;

pub use document::{
    Arg, Call, DataFlow, DocPath, Intrinsic, PathRoot, ResultPath, Selection, Step, Template,
    TimerFrom, ValueExpr,
};
pub(crate) use expr::quietly_why;
pub use expr::{Expr, ExprError};
pub use expr_cost::BUDGET as CONDITION_BUDGET;
pub use http::{connection_of, HttpSpec, HTTP_METHODS, HTTP_TASK, REQUEST_FIELDS};
pub use jsonata::{Jsonata, JsonataRefusal};
pub use policy::{Backoff, Jitter, OnTimeout, RetryPolicy, TaskTimeout};
pub use repeat::{Over, Repeat, DEFAULT_MAX_CONCURRENCY, LOOP_LIMIT};
pub use rule::{Against, Compare, Operand, Rule, TypeTest};

use crate::diag::Pos;
use crate::time::TimerSpec;
use serde::Serialize;
use std::collections::HashMap;

/// Index of a node in [`Process::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeIx(pub u32);

/// Index of a flow in [`Process::flows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FlowIx(pub u32);

/// Which front end a process came from (for display only; the engine must not branch on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Bpmn,
    Hx,
    Asl,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Bpmn => "bpmn",
            Dialect::Hx => "hx",
            Dialect::Asl => "asl",
        }
    }
}

/// What one definition file holds.
#[derive(Debug, Clone, Serialize)]
pub struct Definitions {
    pub processes: Vec<Process>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Process {
    pub id: String,
    pub name: Option<String>,
    /// Non-executable processes load for inspection only; they cannot be started.
    pub executable: bool,
    pub dialect: Dialect,
    pub pos: Pos,
    pub nodes: Vec<Node>,
    pub flows: Vec<Flow>,
    /// The start variable whose value (a string, number or boolean) is an
    /// instance's business key when its start names none (BPMN
    /// `<q:businessKey variable="..."/>` on the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub business_key: Option<String>,
    #[serde(skip)]
    pub by_id: HashMap<String, NodeIx>,
}

impl Process {
    pub fn node(&self, ix: NodeIx) -> &Node {
        &self.nodes[ix.0 as usize]
    }

    pub fn flow(&self, ix: FlowIx) -> &Flow {
        &self.flows[ix.0 as usize]
    }

    /// Whether one of this process's conditions or correlation keys may loop
    /// over data (`Expr::may_iterate`): the runtime then steps its instances
    /// off the async executor, so that an evaluation (bounded by the
    /// condition budget) never holds a thread other instances need.
    pub fn has_iterating_expressions(&self) -> bool {
        let keys = self.nodes.iter().filter_map(|n| match &n.kind {
            NodeKind::Catch(CatchTrigger::Message(m)) => m.correlation_key.as_ref(),
            NodeKind::Throw(t) | NodeKind::End(EndKind::Throw(t)) => {
                t.iter().find_map(|t| match t {
                    Throw::Message {
                        correlation_key, ..
                    } => correlation_key.as_ref(),
                    Throw::Signal { .. } => None,
                })
            }
            NodeKind::Boundary(BoundaryEvent {
                trigger: BoundaryTrigger::Message(m),
                ..
            }) => m.correlation_key.as_ref(),
            // Conditional events (re-evaluated after every step).
            NodeKind::Catch(CatchTrigger::Condition(c))
            | NodeKind::Start(StartTrigger::Condition(c))
            | NodeKind::Boundary(BoundaryEvent {
                trigger: BoundaryTrigger::Condition(c),
                ..
            }) => Some(c),
            _ => None,
        });
        let repeats = self.nodes.iter().flat_map(|n| match &n.kind {
            NodeKind::Fanout(Fanout {
                repeat: Some(r), ..
            }) => r.expressions(),
            _ => Vec::new(),
        });
        self.flows
            .iter()
            .filter_map(|f| f.condition.as_ref())
            .chain(keys)
            .chain(repeats)
            .any(Expr::may_iterate)
            || self
                .nodes
                .iter()
                .any(|n| n.data.as_deref().is_some_and(|d| d.jsonata))
    }

    pub fn find(&self, id: &str) -> Option<&Node> {
        self.by_id.get(id).map(|&ix| self.node(ix))
    }

    /// The start events of a scope (`None` = the process level).
    pub fn starts_in(&self, scope: Option<NodeIx>) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(move |n| n.scope == scope && matches!(n.kind, NodeKind::Start(_)))
    }

    /// The registered task names this process calls (deduplicated, sorted).
    pub fn registered_tasks(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::ServiceTask(t) => match &t.implementation {
                    TaskImpl::Registered(name) => Some(name.as_str()),
                    TaskImpl::Channel(_) | TaskImpl::Http(_) => None,
                },
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The code a deploy refuses a missing module `name` with: what the first
    /// task calling it renames `SUTRA.RUNTIME.TASK_NOT_REGISTERED` to (the
    /// States language's `ResourceNotFound`), else that code.
    pub fn missing_module_code(&self, name: &str) -> crate::codes::Code {
        use crate::codes::Code;
        let missing = Code::TaskNotRegistered.as_str();
        self.nodes
            .iter()
            .find(|n| match &n.kind {
                NodeKind::ServiceTask(t) => {
                    t.implementation == TaskImpl::Registered(name.to_string())
                }
                _ => false,
            })
            .and_then(|n| n.data.as_ref())
            .and_then(|d| Code::parse(d.error_name(missing)))
            .unwrap_or(Code::TaskNotRegistered)
    }

    /// A stateful process can park (a timer, a message wait, a channel call, a
    /// retry policy) and so needs a datasource; otherwise it runs to completion.
    pub fn stateful(&self) -> bool {
        self.nodes.iter().any(|n| match &n.kind {
            NodeKind::Start(StartTrigger::Timer(_)) => true,
            NodeKind::ServiceTask(t) => {
                !t.retries.is_empty() || matches!(t.implementation, TaskImpl::Channel(_))
            }
            NodeKind::Catch(_) | NodeKind::CallProcess { .. } => true,
            // A throw's delivery is a row written with its step.
            NodeKind::EventGateway | NodeKind::Throw(_) | NodeKind::End(EndKind::Throw(_)) => true,
            NodeKind::Fanout(f) => !f.retries.is_empty(),
            NodeKind::Boundary(b) => !matches!(
                b.trigger,
                BoundaryTrigger::Error { .. }
                    | BoundaryTrigger::Escalation { .. }
                    | BoundaryTrigger::Compensation
            ),
            // An event sub-process's message start is a message wait (its timer
            // start is counted above).
            NodeKind::Start(StartTrigger::Message { .. } | StartTrigger::Condition(_)) => {
                n.scope.is_some()
            }
            _ => false,
        })
    }

    /// The compensator of a node: the target of its compensation flow.
    pub fn compensator(&self, ix: NodeIx) -> Option<NodeIx> {
        self.node(ix)
            .outgoing
            .iter()
            .map(|&f| self.flow(f))
            .find(|f| f.kind == FlowKind::Compensation)
            .map(|f| f.target)
    }

    /// Whether the activity `ix` is compensated only by a compensate throw
    /// (it has a compensation boundary), never by a failure's unwind.
    pub fn explicit_compensation(&self, ix: NodeIx) -> bool {
        self.node(ix).boundaries.iter().any(|&b| {
            matches!(
                &self.node(b).kind,
                NodeKind::Boundary(BoundaryEvent {
                    trigger: BoundaryTrigger::Compensation,
                    ..
                })
            )
        })
    }

    /// The event sub-processes directly in a scope (`None` = the process level).
    pub fn event_subs_in(&self, scope: Option<NodeIx>) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(move |n| n.scope == scope && matches!(n.kind, NodeKind::EventSubProcess { .. }))
    }

    /// Rebuild `by_id` (loaders call this once the node list is final).
    pub fn index(&mut self) {
        self.by_id = self.nodes.iter().map(|n| (n.id.clone(), n.ix)).collect();
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub ix: NodeIx,
    /// The id as written in the definition (stable: snapshots refer to nodes by it).
    pub id: String,
    pub name: Option<String>,
    pub pos: Pos,
    /// The enclosing sub-process or event sub-process (a fan-out's branch
    /// scopes are sub-processes whose scope is the fan-out), `None` at
    /// process level.
    pub scope: Option<NodeIx>,
    pub kind: NodeKind,
    pub incoming: Vec<FlowIx>,
    pub outgoing: Vec<FlowIx>,
    /// Boundary events attached to this activity.
    pub boundaries: Vec<NodeIx>,
    /// `Some`: the node waits until every incoming sequence and error flow is
    /// decided (satisfied or dead) and then runs, is skipped, or fails the
    /// instance as the rule says; it receives dead-path signals and, when
    /// skipped, passes them on (HX nodes). `None`: every arriving token runs
    /// it (BPMN; a parallel gateway joins by itself).
    pub join: Option<JoinRule>,
    /// Set when the node works on its token's document (see [`DataFlow`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<DataFlow>>,
}

/// How a node with a join rule decides once all its incoming flows are decided.
///
/// A flow is *satisfied* when its source succeeded (or was skipped by
/// `onTimeout="skip"`, whose flow goes on) and its condition held, or, for an
/// error flow, when its source failed; it is *dead* otherwise (a false
/// condition, a source skipped as dead, a failed source for a sequence flow, a
/// succeeded one for an error flow). Every flow dead: the node is SKIPPED and
/// its outgoing flows are dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinRule {
    /// Runs when every incoming flow is satisfied; some satisfied and some
    /// dead fails the instance with `SUTRA.RUNTIME.JOIN.DEAD_EDGE`.
    All,
    /// Runs when at least one incoming flow is satisfied.
    Any,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NodeKind {
    Start(StartTrigger),
    End(EndKind),
    ServiceTask(ServiceTask),
    /// Takes the first outgoing flow whose condition holds (in document order),
    /// else `default`; neither → `SUTRA.RUNTIME.GATEWAY.NO_FLOW_TAKEN`.
    ExclusiveGateway {
        default: Option<FlowIx>,
    },
    /// Forks on every outgoing flow; joins by waiting for a token on every incoming flow.
    ParallelGateway,
    /// BPMN's inclusive gateway. Split: takes every outgoing flow whose
    /// condition holds (a default flow carries the negation of the others'
    /// conditions, so it is taken exactly when none holds; none taken is
    /// `SUTRA.RUNTIME.GATEWAY.NO_FLOW_TAKEN`). Join (several incoming flows):
    /// an OR-join — a token waits there until no other token of its scope can
    /// still reach an incoming flow of the gateway that has no token yet
    /// (reachability on the IR, `engine::orjoin`), then one token per
    /// incoming flow that has one is merged and leaves.
    InclusiveGateway,
    /// An intermediate catch event: the token waits here.
    Catch(CatchTrigger),
    Boundary(BoundaryEvent),
    /// An embedded sub-process: its children are the nodes whose `scope` is this node.
    SubProcess,
    /// BPMN's event-based gateway: the token waits on the catches its
    /// flows lead to (each a `Catch`); the first to fire wins, the others'
    /// waits are withdrawn in the same step (engine/event_gateway.rs).
    EventGateway,
    /// Throws messages and signals (all of them) and passes on (a BPMN
    /// message or signal intermediate throw event, a send task).
    Throw(Vec<Throw>),
    /// Sets variables and passes on (ASL `Pass`; a BPMN none intermediate throw event).
    /// With a data flow, `set` is the node's result (its effective input when `None`).
    Pass {
        set: Option<serde_json::Value>,
    },
    /// Runs its branch scopes on copies of its token's document and collects
    /// their outputs in an array (States-language `Parallel` and `Map`).
    Fanout(Fanout),
    /// Starts an instance of another deployed process of the same tenant (a
    /// child) and waits for it durably, like a BPMN call activity: the
    /// child's output is the node's result, its failure the node's error
    /// (judged by `retries`, each retry a fresh child). `timeout` bounds
    /// each child (the child is cancelled when it elapses).
    CallProcess {
        process: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        retries: Vec<RetryPolicy>,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout: Option<crate::time::IsoDuration>,
        /// A pinned deployment version of `process` (`None`: its ACTIVE one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
        /// The child's variables from the caller's (`input_path`; `None`:
        /// all of them) and where the child's final variables go
        /// (`result_path`; `None`: merged), as a task's `q:io`.
        #[serde(default)]
        io: IoMapping,
        /// `true`: a child that ended FAILED with an uncaught business error
        /// (a BPMN error) raises that error at the call, where an error
        /// boundary catches it (a BPMN call activity); otherwise every
        /// child failure is a failed attempt of the call.
        #[serde(default)]
        business_errors: bool,
    },
    /// Throws an escalation with this code and passes on (a BPMN
    /// intermediate escalation throw event): the innermost catcher (an
    /// escalation event sub-process of an enclosing scope, else an
    /// escalation boundary of an enclosing activity, `engine::escalation`)
    /// takes it; an interrupting one ends the thrower's scope, a
    /// non-interrupting one forks beside it and the thrower goes on.
    /// Uncaught, it is no failure: the thrower goes on.
    Escalate {
        code: String,
    },
    /// Throws a compensation (a BPMN intermediate compensate throw event):
    /// the completed activities it names are compensated, newest completion
    /// first, one at a time, and the token waits for them (`engine::unwind`).
    Compensate(CompensateThrow),
    /// An event sub-process (`subProcess triggeredByEvent="true"`): never
    /// entered by a flow. Its one start event's trigger (timer, message,
    /// error, escalation) starts it while its enclosing scope runs
    /// (`engine::event_sub`); `interrupting` (the start event's
    /// `isInterrupting`) ends the scope's other nodes first, otherwise it
    /// runs beside them, possibly several times.
    EventSubProcess {
        interrupting: bool,
    },
}

/// What a compensate throw event compensates.
#[derive(Debug, Clone, Serialize)]
pub struct CompensateThrow {
    /// `Some`: this activity only (`activityRef`); `None`: every completed
    /// activity of the throw event's scope (the scope enclosing an event
    /// sub-process, for a throw inside one). A completed sub-process
    /// without a compensator of its own is compensated by compensating its
    /// completed children.
    pub activity: Option<NodeIx>,
}

/// A fan-out's branches: each is a `SubProcess` node scoped to the fan-out.
#[derive(Debug, Clone, Serialize)]
pub struct Fanout {
    pub branches: Vec<NodeIx>,
    /// `Some`: one run of `branches[0]` per item of an array (a `Map`).
    pub items: Option<Items>,
    /// Ordered retriers: a failed fan-out runs again from its input.
    pub retries: Vec<RetryPolicy>,
    /// `Some`: `branches[0]` repeated over variables (a BPMN multi-instance
    /// body or standard loop, see [`Repeat`]); `items` is then `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Box<Repeat>>,
}

/// How a `Map` fans out over an array.
#[derive(Debug, Clone, Serialize)]
pub struct Items {
    /// Where the array is in the effective input (`ItemsPath`).
    pub path: Selection,
    /// The array computed from the input (JSONata's `Items`); replaces `path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expr: Option<Template>,
    /// Builds each iteration's input (`ItemSelector`); `None` = the item itself.
    pub selector: Option<Template>,
    /// Iterations running at once (0 = all).
    pub max_concurrency: u32,
    /// Read from the effective input when the fan-out starts (`MaxConcurrencyPath`);
    /// replaces `max_concurrency`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency_path: Option<Box<DocPath>>,
    /// `true`: one failed iteration fails the whole fan-out; `false`: each
    /// failed item's `{Error, Cause}` takes its place in the result array.
    /// Ignored when a tolerance is set.
    pub fail_on_partial: bool,
    /// How many failed iterations are tolerated (`ToleratedFailureCount[Path]`);
    /// with either tolerance set, failed items take their place as `{Error, Cause}`
    /// until one is exceeded, which fails the fan-out with
    /// `States.ExceedToleratedFailureThreshold`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerated_count: Option<Box<Bound>>,
    /// Which percentage of failed iterations is tolerated (`ToleratedFailurePercentage[Path]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerated_percentage: Option<Box<Bound>>,
}

/// A number written in the definition or read from the document when used.
#[derive(Debug, Clone, Serialize)]
pub enum Bound {
    Fixed(f64),
    Path(DocPath),
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "trigger", rename_all = "snake_case")]
pub enum StartTrigger {
    None,
    /// A schedule: it has no instance until it fires.
    Timer(TimerSpec),
    /// Started by a message with this name.
    Message {
        name: String,
    },
    /// Started by an inbound source (`q:source`): a channel name.
    Source {
        name: String,
    },
    /// The start of an event sub-process: an error raised in its scope whose
    /// code is in `codes` (`None` = any) (BPMN error start event).
    Error {
        codes: Option<Vec<String>>,
    },
    /// The start of an event sub-process: an escalation thrown in its scope
    /// whose code is in `codes` (`None` = any).
    Escalation {
        codes: Option<Vec<String>>,
    },
    /// The start of an event sub-process: the CEL condition becomes true
    /// while its scope runs (`engine::condition`).
    Condition(Expr),
    /// Started by a signal with this name (every ACTIVE process of the
    /// tenant that listens starts one instance per broadcast).
    Signal {
        name: String,
    },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum EndKind {
    /// Ends its token; the scope completes when no token is left.
    None,
    /// Throws a business error with this code (caught by an error boundary or failing the instance).
    Error {
        code: String,
        message: Option<String>,
    },
    /// Ends the whole instance at once: every other token is withdrawn and the
    /// instance ends COMPLETED, as in Camunda and Zeebe (a reached end, not a
    /// cancellation; only a cancel makes an instance TERMINATED).
    Terminate,
    /// Throws an escalation, then ends its token (see `NodeKind::Escalate`).
    Escalation { code: String },
    /// Throws a compensation, waits for it, then ends its token (see
    /// `NodeKind::Compensate`).
    Compensate(CompensateThrow),
    /// Throws messages and signals (all of them), then ends its token like
    /// `None` (a BPMN message or signal end event).
    Throw(Vec<Throw>),
}

/// What a throw event (or a send task) throws: delivered by the runtime
/// after the throwing step's commit, through the durable path of
/// `POST /v1/messages` / `POST /v1/signals` (engine/signal.rs).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "throw", rename_all = "snake_case")]
pub enum Throw {
    /// To the first instance of the tenant waiting for this name and key,
    /// else to the message starts of the tenant's ACTIVE processes; nobody
    /// waiting is not an error.
    Message {
        name: String,
        /// Evaluated over the throwing token's variables.
        correlation_key: Option<Expr>,
        /// `q:io inputPath`: the object of the thrower's variables it carries
        /// (its keys become the receiver's variables); `None`: nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
    },
    /// A broadcast within the tenant: every signal wait armed when it is
    /// thrown, and every ACTIVE process with a signal start of this name.
    Signal {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum TaskImpl {
    /// A WebAssembly component deployed under this name.
    Registered(String),
    /// A wait-state call over a channel (request out, correlated response in).
    Channel(String),
    /// An HTTP call the host makes (`model::http`); its attempts carry the
    /// module name [`HTTP_TASK`].
    Http(Box<HttpSpec>),
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceTask {
    pub implementation: TaskImpl,
    /// Ordered retriers: the first whose `error_equals` matches a failure applies
    /// (BPMN and HX have at most one, matching everything).
    pub retries: Vec<RetryPolicy>,
    /// A per-attempt timeout (HX `<timeout>`), or a channel call's route-less `q:timeout`.
    pub timeout: Option<TaskTimeout>,
    /// `false` forbids automatic retries (HX `idempotent="false"`).
    pub idempotent: bool,
    pub io: IoMapping,
}

/// How a task's input is built from the variables and where its output goes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IoMapping {
    /// A JSONPath selecting the task's input from the variables (`None` = all variables).
    pub input_path: Option<String>,
    /// Where the output goes: `None` merges an object output's keys into the
    /// variables (a non-object output is stored under the node id); `Some(path)`
    /// places the whole output at that JSONPath.
    pub result_path: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "trigger", rename_all = "snake_case")]
pub enum CatchTrigger {
    Timer(TimerSpec),
    Message(MessageRef),
    /// A timer whose due time is read from the token's document when it is armed.
    TimerFrom(TimerFrom),
    /// A conditional event: waits until the CEL condition holds over the
    /// variables (re-evaluated at the end of every step, `engine::condition`).
    Condition(Expr),
    /// A broadcast signal with this name (engine/signal.rs).
    Signal {
        name: String,
    },
    /// BPMN "Multiple": the first of these to fire moves the token on (the
    /// other waits are withdrawn in the same step).
    Any(Vec<CatchTrigger>),
}

#[derive(Debug, Clone, Serialize)]
pub struct MessageRef {
    pub name: String,
    /// Evaluated over the variables when the wait is armed; a message must carry
    /// the same key to correlate. `None` = match by name alone.
    pub correlation_key: Option<Expr>,
    /// A named event awaited by one instance (the States language's
    /// `EventName`), resumed by its instance id and name (`sutra resume`,
    /// `POST /v1/instances/{id}/events/{name}`), not a correlated message.
    pub event: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BoundaryEvent {
    pub attached_to: NodeIx,
    /// An interrupting boundary cancels the activity; a non-interrupting one forks a token.
    pub interrupting: bool,
    pub trigger: BoundaryTrigger,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "trigger", rename_all = "snake_case")]
pub enum BoundaryTrigger {
    /// Catches business errors whose code is in `codes` (`None` = any code).
    /// `result_path` places `{"Error", "Cause"}` in the variables (ASL Catch).
    /// `catch_failures`: also catch a task failure once its retries are spent
    /// (ASL `Catch` does; a BPMN error boundary does not — there an exhausted
    /// retry policy fails the instance, as the seed says).
    Error {
        codes: Option<Vec<String>>,
        result_path: Option<String>,
        catch_failures: bool,
    },
    Timer(TimerSpec),
    Message(MessageRef),
    /// Catches an escalation thrown inside the activity (or by a called
    /// child) whose code is in `codes` (`None` = any).
    Escalation {
        codes: Option<Vec<String>>,
    },
    /// Fires when the CEL condition becomes true (re-evaluated at the end
    /// of every step while the activity runs, `engine::condition`).
    Condition(Expr),
    /// A compensation boundary: never fires. It marks its activity's
    /// compensator (the target of the activity's compensation flow) as one
    /// that only a compensate throw runs (BPMN): an uncaught failure does
    /// not unwind such an activity.
    Compensation,
    /// A broadcast signal with this name.
    Signal {
        name: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Flow {
    pub ix: FlowIx,
    pub id: String,
    pub pos: Pos,
    pub source: NodeIx,
    pub target: NodeIx,
    /// Only on flows out of an exclusive gateway (or a conditional flow).
    pub condition: Option<Expr>,
    pub kind: FlowKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowKind {
    /// Taken when the source completes (and the condition, if any, holds).
    Sequence,
    /// Taken when the source activity FAILS (its retries spent, a business
    /// error, `onTimeout="fail"`): the failure is handled, not propagated — no
    /// unwind — and `{node, code, message, cause}` is placed in the variable
    /// `error`. The source stays FAILED.
    Error,
    /// The source's effects are undone by the target (a task, run only during
    /// an unwind, never along forward flows).
    Compensation,
}

/// The variable paths of task input/output mappings (BPMN `q:io`): `$`,
/// `$.a`, `$.a.b` (names only). Split `$.a.b` into `["a", "b"]`; `$` is the
/// root (empty). The loaders check their paths with this, so a path that
/// loads is one the engine can read and write.
pub fn var_path_segments(path: &str) -> Result<Vec<&str>, String> {
    let path = path.trim();
    let rest = path
        .strip_prefix('$')
        .ok_or_else(|| format!("path `{path}` must start with `$`"))?;
    if rest.is_empty() {
        return Ok(vec![]);
    }
    let rest = rest
        .strip_prefix('.')
        .ok_or_else(|| format!("path `{path}` must be of the form $.a.b"))?;
    let segs: Vec<&str> = rest.split('.').collect();
    if segs
        .iter()
        .any(|s| s.is_empty() || s.contains(['[', ']', '*', ' ']))
    {
        return Err(format!("path `{path}` must be of the form $.a.b"));
    }
    Ok(segs)
}
