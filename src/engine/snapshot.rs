//! The instance snapshot: everything the engine needs to resume an instance,
//! stored as versioned JSON. Nodes are referred to by their definition ids
//! (stable across builds), tokens and parks by numbers the snapshot mints.
//!
//! Invariant: every park in `parks` belongs to exactly one live token and is
//! listed in that token's `parks()`; removing a token withdraws its parks.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Bumped on every incompatible change; old formats are migrated on load or refused
/// with `SUTRA.RUNTIME.SNAPSHOT_VERSION`.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// The format of a snapshot that leaves out a copy it can rebuild (what
/// [`Elided`] names: [`Snapshot::to_json`]). A snapshot with nothing
/// left out is still written as [`SNAPSHOT_FORMAT`], so a build that knows
/// only format 1 reads every snapshot it can read correctly and refuses the
/// rest with `SUTRA.RUNTIME.SNAPSHOT_VERSION`, never reading empty variables.
pub const SNAPSHOT_FORMAT_ELIDED: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InstanceState {
    /// An attempt is in flight (or about to be).
    Running,
    /// Nothing runs now: the instance waits on parks (timers, messages, backoffs).
    Waiting,
    Completed,
    /// Cancelled.
    Terminated,
    /// Failed: retained, inspectable, blocks its deployment's retirement.
    Failed,
    /// A failure was unwound: every compensator of a succeeded node ran and
    /// succeeded (the error still says what failed). Like COMPLETED for
    /// retention and retirement.
    Compensated,
}

impl InstanceState {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Running => "RUNNING",
            InstanceState::Waiting => "WAITING",
            InstanceState::Completed => "COMPLETED",
            InstanceState::Terminated => "TERMINATED",
            InstanceState::Failed => "FAILED",
            InstanceState::Compensated => "COMPENSATED",
        }
    }

    pub fn parse(s: &str) -> Option<InstanceState> {
        [
            InstanceState::Running,
            InstanceState::Waiting,
            InstanceState::Completed,
            InstanceState::Terminated,
            InstanceState::Failed,
            InstanceState::Compensated,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            InstanceState::Completed
                | InstanceState::Terminated
                | InstanceState::Failed
                | InstanceState::Compensated
        )
    }
}

/// A code and message: an instance error's cause (the last attempt's failure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    pub code: String,
    pub message: String,
}

/// Why an instance FAILED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceError {
    /// An engine code (`SUTRA.RUNTIME.RETRY.EXHAUSTED`, ...) or an uncaught
    /// business error's own code.
    pub code: String,
    pub message: String,
    /// The node where it failed (a `from-failure` retry resumes there).
    pub node: Option<String>,
    pub cause: Option<Cause>,
    /// The compensators that failed during the unwind this error began (the
    /// instance then ends FAILED rather than COMPENSATED).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensation_failures: Vec<CompensationFailure>,
}

/// One compensator that failed during an unwind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationFailure {
    /// The node it was to compensate (it stays SUCCEEDED).
    pub node: String,
    /// The compensator node.
    pub compensator: String,
    /// `SUTRA.RUNTIME.COMPENSATION.FAILED`.
    pub code: String,
    pub message: String,
    /// The compensator's own last failure.
    pub cause: Option<Cause>,
}

/// The state of one node of an instance (the last time it ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    /// Reached and about to run (its join, if any, decided).
    Ready,
    /// An attempt in flight or a backoff, a timer or message wait, a sub-process.
    Running,
    Succeeded,
    /// It failed (handled by an error flow or a boundary, or not).
    Failed,
    /// Not run: every incoming flow was dead (a branch not taken), or its
    /// attempt timed out with `onTimeout="skip"`.
    Skipped,
    /// It was READY or RUNNING when the instance was cancelled, ended, or
    /// began unwinding.
    Cancelled,
    /// It had SUCCEEDED and its compensator has undone it.
    Compensated,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Ready => "READY",
            NodeState::Running => "RUNNING",
            NodeState::Succeeded => "SUCCEEDED",
            NodeState::Failed => "FAILED",
            NodeState::Skipped => "SKIPPED",
            NodeState::Cancelled => "CANCELLED",
            NodeState::Compensated => "COMPENSATED",
        }
    }

    /// READY or RUNNING.
    pub fn is_active(self) -> bool {
        matches!(self, NodeState::Ready | NodeState::Running)
    }
}

/// A join in progress (a node with a join rule): its incoming flows decided so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinState {
    pub node: String,
    /// The sub-process token it is in (`None` at process level).
    pub scope: Option<u64>,
    /// Flow ids satisfied so far.
    pub satisfied: Vec<String>,
    /// Flow ids dead so far.
    pub dead: Vec<String>,
}

/// A node to compensate and its compensator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    pub node: String,
    pub compensator: String,
}

/// An unwind in progress (or finished, kept for inspection): compensators run
/// one at a time, newest completion first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unwind {
    /// Left to run, next first.
    pub pending: Vec<Compensation>,
    /// The one running now and its token.
    pub current: Option<(Compensation, u64)>,
    /// Compensated so far, in order.
    pub done: Vec<String>,
    pub failed: Vec<CompensationFailure>,
    /// The tokens of compensate throw events waiting for this compensation
    /// (they go on when it ends); empty for the unwind of an uncaught
    /// failure, which ends the instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume: Vec<u64>,
}

impl Unwind {
    /// The unwind of an uncaught failure (not a compensate throw's).
    pub fn is_failure(&self) -> bool {
        self.resume.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkKind {
    /// Backs an attempt in flight: if it falls due, its runner died; re-run it.
    Attempt,
    /// A retry backoff: due at the backoff instant.
    Retry,
    Timer,
    /// A message wait: no due time; fired by correlation.
    Message,
    /// A channel call's outstanding request: its route-less timeout (due
    /// time, or none) and the anchor of its outbox row (engine/channel.rs).
    Channel,
    /// A child flow in progress (engine/child.rs): its call's timeout (due
    /// time, or none); the child's end makes it due with the child's
    /// outcome stored on its row.
    Child,
    /// A conditional event's wait (engine/condition.rs): no due time, no
    /// correlation; the engine re-evaluates its condition after every step.
    Condition,
    /// A signal wait (engine/signal.rs): no due time; its name rides in
    /// `message` (the store's `message_name`), fired by a broadcast.
    Signal,
    /// A fan-out stopped starting iterations at the step's budget
    /// (engine/fanout.rs): due at once; firing it starts the next ones in a
    /// step of their own, so no step's host work grows with the items.
    Continue,
}

impl ParkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkKind::Attempt => "attempt",
            ParkKind::Retry => "retry",
            ParkKind::Timer => "timer",
            ParkKind::Message => "message",
            ParkKind::Channel => "channel",
            ParkKind::Child => "child",
            ParkKind::Condition => "condition",
            ParkKind::Signal => "signal",
            ParkKind::Continue => "continue",
        }
    }
}

/// A message wait's correlation: name plus the key evaluated when it was armed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageKey {
    pub name: String,
    pub key: Option<String>,
    /// A named event of this instance (`model::MessageRef::event`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub event: bool,
}

/// Where a repeating (non-interrupting cycle) timer is on its grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleState {
    #[serde(serialize_with = "crate::time::rfc3339::write")]
    pub armed_at: DateTime<Utc>,
    pub slot: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Park {
    pub kind: ParkKind,
    /// The token it belongs to.
    pub token: u64,
    /// The node it waits at: the task (attempt/retry), the catch event, or the boundary event.
    pub node: String,
    #[serde(serialize_with = "crate::time::rfc3339::write_opt")]
    pub due: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<MessageKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<CycleState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum TaskPhase {
    /// Attempt `attempt` is in flight, backed by attempt park `park`.
    Running { park: u64 },
    /// Waiting out a backoff before attempt `attempt`, on retry park `park`.
    Backoff { park: u64 },
    /// A channel call: request `request` of attempt `attempt` is out (or in
    /// the outbox), its window on channel park `park`.
    Calling { park: u64, request: String },
    /// A process call: child instance `instance` runs, awaited on child
    /// park `park`.
    Child { park: u64, instance: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// The attempt in flight or next to run (1-based).
    pub attempt: u32,
    pub phase: TaskPhase,
    /// Retries granted so far, per retrier of the task (ASL keeps one counter each).
    pub granted: Vec<u32>,
    /// When the current attempt started (for its record).
    #[serde(serialize_with = "crate::time::rfc3339::write")]
    pub since: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TokenStatus {
    /// About to be advanced (never persisted between steps).
    Ready,
    /// At a service task.
    Task(TaskState),
    /// At a catch event, on park `park`.
    Waiting { park: u64 },
    /// At a parallel join, waiting for its siblings.
    Joining,
    /// At a sub-process whose children run.
    InSubProcess,
    /// At a fan-out whose branches (or iterations) run.
    Fanout(FanoutState),
    /// A branch (or iteration) of the fan-out token that is its scope.
    Branch {
        slot: u32,
        /// The item a `Map` iteration runs on (`$$.Map.Item.Value`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<Value>,
    },
}

/// A fan-out of this many items or more makes its snapshot wide
/// ([`Snapshot::is_wide`]).
pub const WIDE_FANOUT: usize = 1_000;

/// Where a fan-out is: its branches' results so far, and its retries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanoutState {
    /// One per branch or item, in order; `None` until it ended.
    pub results: Vec<Option<Value>>,
    /// The items of a `Map` (the iterations not started yet read theirs
    /// here), unless `items_at` says where they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Value>,
    /// Where a `Map`'s items are in the fan-out token's own document (a JSON
    /// pointer), when its items path names them there as they are: then the
    /// list is stored once, in that document, not copied here as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_at: Option<String>,
    /// The variable a multi-instance body iterates, when its collection is
    /// one named as is (read from the body token's scopes): the stored text
    /// may then leave out the elements not started yet ([`Snapshot::to_json`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_of: Option<String>,
    /// The fan-out's effective input (branches and item selectors read it).
    #[serde(default)]
    pub input: Value,
    /// The next branch or item to start.
    pub next: u32,
    /// The run (1-based; a retry runs the fan-out again).
    pub attempt: u32,
    /// Retries granted so far, per retrier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granted: Vec<u32>,
    /// The retry park while waiting out a backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<u64>,
    /// Iterations running at once, when read from the input (0 = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Failed iterations so far (counted against the tolerances).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// The tolerances read when the fan-out started: failed items, and the
    /// percentage in thousandths of a percent (an integer, so the state stays `Eq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerated: Option<(Option<u64>, Option<u64>)>,
    /// The continue park (`ParkKind::Continue`) while the iterations left
    /// wait for the next step (the step's budget was spent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub id: u64,
    /// The node id it sits at.
    pub node: String,
    /// The sub-process token that owns it (`None` at process level).
    pub scope: Option<u64>,
    /// The flow it arrived by (joins count arrivals per flow).
    pub via: Option<String>,
    pub status: TokenStatus,
    /// Timer and message boundary parks armed for the activity it is at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boundary_parks: Vec<u64>,
    /// The document it carries (nodes with a `DataFlow` read and rewrite it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<Value>,
    /// The variables scope of a multi-instance iteration (its branch token):
    /// the tokens inside read these over the enclosing variables and write
    /// here (engine/scope.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars: Option<Map<String, Value>>,
}

impl Token {
    /// Every park this token owns.
    pub fn parks(&self) -> Vec<u64> {
        let mut v = self.boundary_parks.clone();
        match &self.status {
            TokenStatus::Task(t) => match t.phase {
                TaskPhase::Running { park }
                | TaskPhase::Backoff { park }
                | TaskPhase::Calling { park, .. }
                | TaskPhase::Child { park, .. } => v.push(park),
            },
            TokenStatus::Waiting { park } => v.push(*park),
            TokenStatus::Fanout(s) => v.extend(s.backoff.iter().chain(&s.resume)),
            _ => {}
        }
        v
    }
}

/// The parent of a child instance: the instance whose park `park` awaits
/// it, and how deep it is nested (1 = a child of a top-level instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    pub instance: String,
    pub park: u64,
    pub depth: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: u32,
    pub instance_id: String,
    pub tenant: String,
    pub deployment_id: String,
    pub process_id: String,
    pub state: InstanceState,
    pub variables: Map<String, Value>,
    /// The variables the instance started with (a `full` retry replays them).
    pub input: Map<String, Value>,
    pub tokens: Vec<Token>,
    pub parks: BTreeMap<u64, Park>,
    pub next_token: u64,
    pub next_park: u64,
    pub next_journal: u64,
    /// Node ids in completion order (compensation unwinds in reverse).
    pub completed: Vec<String>,
    /// Each reached node's state (the last time it ran), by node id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_states: BTreeMap<String, NodeState>,
    /// The recorded output of each succeeded node that has a compensator (its
    /// compensator receives it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, Value>,
    /// Joins waiting for more of their incoming flows to be decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<JoinState>,
    /// The unwind (compensation) in progress, or the one that ended the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwind: Option<Unwind>,
    pub error: Option<InstanceError>,
    #[serde(serialize_with = "crate::time::rfc3339::write")]
    pub started_at: DateTime<Utc>,
    #[serde(serialize_with = "crate::time::rfc3339::write_opt")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Set on a child instance (a process call started it): its end is
    /// delivered to that parent's park.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// Variables (`Assign`) by scope: 0 the top level, else the branch
    /// token of a Parallel branch or Map iteration (`engine::variables`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub assigned: BTreeMap<u64, Map<String, Value>>,
    /// The escalation codes thrown and caught by nobody (engine::escalation):
    /// a child's are raised at its call activity when it ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<String>,
    /// The condition parks whose condition held at the last evaluation: a
    /// conditional event fires when its condition *becomes* true.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub held: std::collections::BTreeSet<u64>,
    /// What the stored text left out (format 2): set only while
    /// [`Snapshot::to_json`] writes, resolved by [`Snapshot::from_json`].
    #[serde(default, skip_serializing_if = "Elided::is_none")]
    pub elided: Elided,
}

/// The copies a stored snapshot leaves out, to be rebuilt on load: a wide
/// fan-out's list is in the start input, the variables (a States machine's
/// mirror of its document, or a multi-instance body's collection) and the
/// fan-out token's document or the body's items, and each commit of its
/// steps would write it that many times (issue 33, item 1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elided {
    /// `variables` are the mirror of this top-level token's document
    /// ([`mirror_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables_of: Option<u64>,
    /// `input` equals `variables`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_is_variables: bool,
    /// The fan-out tokens whose items are their collection variable
    /// (`FanoutState::items_of`) as it is, each element started so far
    /// taken (`null`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items_in_variables: Vec<u64>,
}

impl Elided {
    fn is_none(&self) -> bool {
        self.variables_of.is_none()
            && !self.input_is_variables
            && self.items_in_variables.is_empty()
    }
}

/// A multi-instance body's items as its collection variable `of` gives
/// them: the elements from `next` on, each one before taken (`null`).
fn items_from(of: &[Value], next: u32) -> impl Iterator<Item = &Value> + '_ {
    static TAKEN: Value = Value::Null;
    of.iter()
        .enumerate()
        .map(move |(i, v)| if i < next as usize { &TAKEN } else { v })
}

/// The variables that mirror a top-level document: the object itself, or
/// any other value as `{"output": value}`.
pub fn mirror_of(doc: &Value) -> Map<String, Value> {
    match doc {
        Value::Object(m) => m.clone(),
        other => {
            let mut m = Map::new();
            m.insert("output".into(), other.clone());
            m
        }
    }
}

/// Whether `vars` are [`mirror_of`] `doc` (compared in place, no copy).
fn mirrors(vars: &Map<String, Value>, doc: &Value) -> bool {
    match doc {
        Value::Object(m) => m == vars,
        other => vars.len() == 1 && vars.get("output") == Some(other),
    }
}

impl Snapshot {
    /// An empty snapshot of no instance: what a holder keeps for the
    /// moment its snapshot is being stepped (moved into `engine::apply_keeping`).
    pub fn placeholder() -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            instance_id: String::new(),
            tenant: String::new(),
            deployment_id: String::new(),
            process_id: String::new(),
            state: InstanceState::Waiting,
            variables: Map::new(),
            input: Map::new(),
            tokens: Vec::new(),
            parks: BTreeMap::new(),
            next_token: 1,
            next_park: 1,
            next_journal: 1,
            completed: Vec::new(),
            node_states: BTreeMap::new(),
            outputs: BTreeMap::new(),
            joins: Vec::new(),
            unwind: None,
            error: None,
            started_at: DateTime::<Utc>::UNIX_EPOCH,
            ended_at: None,
            parent: None,
            assigned: BTreeMap::new(),
            escalations: Vec::new(),
            held: Default::default(),
            elided: Elided::default(),
        }
    }

    /// The token `id`. Tokens are minted in increasing order and appended,
    /// so the list is sorted by id and a binary search finds one (a fan-out
    /// holds hundreds); a list that is not sorted (never written so, but a
    /// stored snapshot is input) is searched from end to end.
    pub fn token(&self, id: u64) -> Option<&Token> {
        match self.tokens.binary_search_by_key(&id, |t| t.id) {
            Ok(i) => self.tokens.get(i),
            Err(_) => self.tokens.iter().find(|t| t.id == id),
        }
    }

    pub fn token_mut(&mut self, id: u64) -> Option<&mut Token> {
        match self.tokens.binary_search_by_key(&id, |t| t.id) {
            Ok(i) => self.tokens.get_mut(i),
            Err(_) => self.tokens.iter_mut().find(|t| t.id == id),
        }
    }

    /// The stored text. A copy the text can do without is left out and
    /// rebuilt by [`Snapshot::from_json`] (format [`SNAPSHOT_FORMAT_ELIDED`]):
    /// the variables when they mirror a top-level token's document, the
    /// start input when it equals the variables, a multi-instance body's
    /// elements not started yet when its collection variable still holds
    /// them (`FanoutState::items_of`). Each is checked by
    /// comparing in place, so nothing is left out that would load changed.
    /// Takes `&mut` only to move the left-out maps aside while it writes;
    /// the snapshot is as it was when it returns.
    pub fn to_json(&mut self) -> String {
        let input_is_variables = !self.input.is_empty() && self.input == self.variables;
        let variables_of = if self.variables.is_empty() {
            None
        } else {
            self.tokens
                .iter()
                .filter(|t| t.scope.is_none())
                .find(|t| t.doc.as_ref().is_some_and(|d| mirrors(&self.variables, d)))
                .map(|t| t.id)
        };
        let items_in_variables: Vec<u64> = self
            .tokens
            .iter()
            .filter(|t| self.items_in_variable(t))
            .map(|t| t.id)
            .collect();
        let elided = Elided {
            variables_of,
            input_is_variables,
            items_in_variables,
        };
        if elided.is_none() {
            return self.write();
        }
        let input = input_is_variables.then(|| std::mem::take(&mut self.input));
        let variables = variables_of.map(|_| std::mem::take(&mut self.variables));
        let mut items = Vec::new();
        for &id in &elided.items_in_variables {
            if let Some(TokenStatus::Fanout(st)) = self.token_mut(id).map(|t| &mut t.status) {
                items.push((id, std::mem::take(&mut st.items)));
            }
        }
        let format = std::mem::replace(&mut self.format, SNAPSHOT_FORMAT_ELIDED);
        self.elided = elided;
        let text = self.write();
        self.elided = Elided::default();
        self.format = format;
        for (id, list) in items {
            if let Some(TokenStatus::Fanout(st)) = self.token_mut(id).map(|t| &mut t.status) {
                st.items = list;
            }
        }
        if let Some(v) = variables {
            self.variables = v;
        }
        if let Some(i) = input {
            self.input = i;
        }
        text
    }

    /// Whether `t` is a fan-out whose items are exactly what its
    /// collection variable gives ([`items_from`]), compared in place.
    fn items_in_variable(&self, t: &Token) -> bool {
        let TokenStatus::Fanout(st) = &t.status else {
            return false;
        };
        let (Some(name), false) = (&st.items_of, st.items.is_empty()) else {
            return false;
        };
        match self.visible_var(t.id, name) {
            Some(Value::Array(of)) => st.items.iter().eq(items_from(of, st.next)),
            _ => false,
        }
    }

    /// Variable `name` as token `id` sees it: the innermost scope of its
    /// own that has it (`Token::vars`), else the instance's variables.
    pub fn visible_var(&self, id: u64, name: &str) -> Option<&Value> {
        let mut cur = self.token(id);
        while let Some(t) = cur {
            if let Some(v) = t.vars.as_ref().and_then(|v| v.get(name)) {
                return Some(v);
            }
            cur = t.scope.and_then(|s| self.token(s));
        }
        self.variables.get(name)
    }

    fn write(&self) -> String {
        // A Snapshot holds only strings, numbers, maps and JSON values: it always serialises.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Whether it holds a wide fan-out (at least [`WIDE_FANOUT`] items or
    /// branches): what makes serialising it, and a step over it, take
    /// milliseconds rather than microseconds.
    pub fn is_wide(&self) -> bool {
        self.tokens.iter().any(
            |t| matches!(&t.status, TokenStatus::Fanout(st) if st.results.len() >= WIDE_FANOUT),
        )
    }

    /// Parse a stored snapshot, refusing formats this build does not know.
    pub fn from_json(text: &str) -> Result<Snapshot, String> {
        /// The format alone (the rest skipped, not built): a snapshot is
        /// then parsed straight from its text, with no `Value` in between
        /// (a wide fan-out's snapshot is parsed on every step it is not kept).
        #[derive(Deserialize)]
        struct Format {
            #[serde(default)]
            format: u64,
        }
        let Format { format } = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if format != u64::from(SNAPSHOT_FORMAT) && format != u64::from(SNAPSHOT_FORMAT_ELIDED) {
            return Err(format!(
                "snapshot format {format} is not supported by this build (expects {SNAPSHOT_FORMAT} or {SNAPSHOT_FORMAT_ELIDED})"
            ));
        }
        let mut snap: Snapshot = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let elided = std::mem::take(&mut snap.elided);
        if let Some(id) = elided.variables_of {
            let doc = snap.token(id).and_then(|t| t.doc.as_ref()).ok_or_else(|| {
                format!("the snapshot's variables mirror token {id}, which has no document")
            })?;
            snap.variables = mirror_of(doc);
        }
        if elided.input_is_variables {
            snap.input = snap.variables.clone();
        }
        for id in elided.items_in_variables {
            let st = match snap.token(id).map(|t| &t.status) {
                Some(TokenStatus::Fanout(st)) => st,
                _ => return Err(format!("the snapshot's token {id} is no fan-out")),
            };
            let (name, next) = (st.items_of.clone().unwrap_or_default(), st.next);
            let items: Vec<Value> = match snap.visible_var(id, &name) {
                Some(Value::Array(of)) => items_from(of, next).cloned().collect(),
                _ => {
                    return Err(format!(
                        "the items of fan-out token {id} are variable `{name}`, which is no array"
                    ))
                }
            };
            if let Some(TokenStatus::Fanout(st)) = snap.token_mut(id).map(|t| &mut t.status) {
                st.items = items;
            }
        }
        snap.format = SNAPSHOT_FORMAT;
        Ok(snap)
    }
}
