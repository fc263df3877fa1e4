//! The engine core: a sans-IO state machine over the IR.
//!
//! Given a process, an instance snapshot, an event and [`Inputs`] (`now`, a
//! jitter draw), [`apply`] returns the new snapshot and the [`Effect`]s the
//! runtime must carry out (run this attempt, arm or withdraw this park, record
//! this attempt, journal this). It advances every token until each reaches a
//! wait state (run-to-completion between waits).
//!
//! Invariants:
//! - **no I/O, no clock read, no sleep, no randomness** here: same inputs, same
//!   outputs;
//! - every park the snapshot holds was announced by an `Effect::Arm`, and every
//!   park removed from it by an `Effect::Withdraw` (or the terminal
//!   `Effect::Ended`, after which the instance has no park);
//! - an event that no longer applies (a late attempt result for a token that
//!   left, a park already withdrawn) changes nothing but the journal.

/// `journal!(m, kind, node, data)`: [`machine::Machine::journal`], building
/// `data` only when the journal is wanted ([`Inputs::journal`]).
macro_rules! journal {
    ($m:expr, $kind:expr, $node:expr, $data:expr $(,)?) => {
        if $m.inputs.journal {
            let data = $data;
            $m.journal($kind, $node, data)
        } else {
            $m.skip_journal()
        }
    };
}

mod channel;
mod child;
mod choice;
mod condition;
mod context_reads;
mod docflow;
pub mod document;
mod edit;
mod escalation;
mod event_gateway;
mod event_sub;
mod fanout;
mod flow;
mod intrinsics;
mod jsonata;
mod machine;
mod migrate;
mod orjoin;
mod outcome;
mod parks;
mod repeat;
mod scope;
mod signal;
pub mod snapshot;
mod unwind;
mod variables;
mod vars;

pub use channel::{call_of, correlation_of, parse_correlation, CallView, ChannelRequest};
pub use child::{child_id, ChildOutcome, ChildStart};
pub use intrinsics::constant;
pub use migrate::migrate;
pub use signal::{Thrown, ThrownKind};
pub use snapshot::{
    Cause, Compensation, CompensationFailure, InstanceError, InstanceState, MessageKey, NodeState,
    ParentLink, Park, ParkKind, Snapshot, Token, TokenStatus, Unwind, SNAPSHOT_FORMAT,
};

use crate::codes::{Code, ErrorClass};
use crate::model::Process;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How one task attempt ended, as the engine sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TaskOutcome {
    Completed {
        output: Value,
    },
    /// A modelled outcome: routed to an error boundary, never retried.
    BusinessError {
        code: String,
        message: String,
        details: Option<Value>,
    },
    /// A failed attempt: the retry policy judges it.
    Failed {
        code: String,
        class: ErrorClass,
        retryable: bool,
        message: String,
        details: Option<Value>,
        /// The delay the counterpart asked for (an HTTP `Retry-After`): when a
        /// retrier applies, the next attempt waits this long (at most its
        /// maximum delay) instead of its backoff.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
}

impl TaskOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            TaskOutcome::Completed { .. } => "completed",
            TaskOutcome::BusinessError { .. } => "business_error",
            TaskOutcome::Failed { .. } => "failed",
        }
    }
}

/// What happened to an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// An attempt ended (`token` and `attempt` identify it).
    AttemptEnded {
        token: u64,
        attempt: u32,
        outcome: TaskOutcome,
    },
    /// A park fell due (a timer, a retry backoff, a lost attempt's lease).
    ParkFired { park: u64 },
    /// A message correlated to message park `park`, carrying variables.
    MessageArrived {
        park: u64,
        variables: Map<String, Value>,
    },
    /// A broadcast signal reached signal park `park` (engine/signal.rs).
    SignalArrived {
        park: u64,
        variables: Map<String, Value>,
    },
    /// Cancel the instance: TERMINATED, every park withdrawn.
    Cancel { reason: Option<String> },
    /// The counterpart of the channel call at `token` answered (channel.rs):
    /// `outcome` is `Completed` (its variables) or `BusinessError`. `sent`
    /// names the call's current request if the runtime saw it gone out.
    ChannelAnswered {
        token: u64,
        channel: String,
        sent: Option<String>,
        outcome: TaskOutcome,
    },
    /// A FAILED instance resumes at its failed node with a fresh budget
    /// (after a migration, migrate.rs).
    Resume,
    /// The outbox gave up on request `request` of the call at `token` (the
    /// poison ceiling).
    DeliveryFailed {
        token: u64,
        request: String,
        message: String,
    },
    /// The child instance awaited on child park `park` ended (child.rs).
    /// A child park that fires without it (`ParkFired`) is its timeout.
    ChildEnded { park: u64, outcome: ChildOutcome },
    /// An operator sets and unsets variables of a FAILED or WAITING
    /// instance (edit.rs); `by` says who, for the journal.
    EditVariables {
        set: Map<String, Value>,
        unset: Vec<String>,
        by: Option<String>,
    },
}

/// The inputs a step may depend on besides the snapshot and the event.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub now: DateTime<Utc>,
    /// A uniform draw in [0, 1) for full jitter (the runtime's RNG, or fixed in tests).
    pub draw: f64,
    /// How long an attempt may be in flight before its attempt park falls due
    /// and it is presumed lost (the sandbox deadline plus a margin).
    pub attempt_lease: std::time::Duration,
    /// Whether the step's journal entries are wanted ([`Effect::Journal`]):
    /// the runtime keeps them only with `sutra.audit.sql`; without it they
    /// are not built (their sequence numbers advance all the same, so the
    /// snapshot is the same either way).
    pub journal: bool,
}

/// One attempt to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRequest {
    pub token: u64,
    /// The task node id.
    pub node: String,
    /// The registered task (module) name.
    pub task: String,
    pub attempt: u32,
    /// JSON input for the guest.
    pub input: Value,
    /// Stable across the attempts of one task execution.
    pub idempotency_key: String,
    /// A per-attempt bound from the model (tightens the sandbox deadline).
    pub timeout: Option<std::time::Duration>,
}

/// One finished attempt, recorded whether or not the journal is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub token: u64,
    pub node: String,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub outcome: String,
    pub code: Option<String>,
    /// The error class of a failed attempt (a guest's own class for its own
    /// code); none for a completion or a business error. Absent in records
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ErrorClass>,
    pub message: Option<String>,
    /// The fan-out item it ran in: the innermost iteration (a Map item, a
    /// Parallel branch, a multi-instance or loop iteration) around its token;
    /// none outside any fan-out, and in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<AttemptItem>,
}

/// The fan-out item an attempt ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptItem {
    /// The fan-out node (its IR id: a Map, a Parallel, `A#body` for a BPMN
    /// activity `A` with loop characteristics).
    pub node: String,
    /// The item's index (its branch token's slot, 0-based).
    pub index: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub node: Option<String>,
    pub data: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Effect {
    RunAttempt(AttemptRequest),
    /// Put a channel-call request in the outbox, in this step's transaction.
    Request(ChannelRequest),
    /// Create a child instance (a process call), in this step's
    /// transaction; its end comes back as `Event::ChildEnded`.
    StartChild(ChildStart),
    /// Cancel child instance `instance` once this step is committed: the
    /// process call awaiting it is gone (a cancel, an interrupting
    /// boundary, the parent's end, the call's timeout).
    CancelChild {
        instance: String,
        reason: String,
    },
    /// Throw a message or a signal: written with this step's commit (the
    /// store's `signals` outbox) and delivered by the runtime after it.
    Throw(Thrown),
    /// Persist park `seq` (its details are in the snapshot's `parks`).
    Arm {
        seq: u64,
        park: Park,
    },
    Withdraw {
        seq: u64,
    },
    RecordAttempt(AttemptRecord),
    Journal(JournalEntry),
    /// The instance reached a terminal state: stamp it, remove every park.
    Ended {
        state: InstanceState,
    },
    /// Attempt `attempt` of `token` was in flight when its token was removed
    /// (a cancel, an unwind, an interrupting boundary): its result will be
    /// discarded when it arrives. `interruptible` is false for a task declared
    /// non-idempotent, whose attempt must be let finish; a runtime that can
    /// interrupt attempts may stop the others.
    AttemptAbandoned {
        token: u64,
        node: String,
        attempt: u32,
        interruptible: bool,
    },
}

/// The result of one step.
#[derive(Debug, Clone)]
pub struct Step {
    pub snapshot: Snapshot,
    pub effects: Vec<Effect>,
}

/// A step that cannot be applied at all (the instance is left unchanged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct EngineError {
    pub code: Code,
    pub message: String,
}

impl EngineError {
    fn new(code: Code, message: impl Into<String>) -> Self {
        EngineError {
            code,
            message: message.into(),
        }
    }
}

/// Who and where a new instance is.
#[derive(Debug, Clone)]
pub struct NewInstance<'a> {
    pub instance_id: &'a str,
    pub tenant: &'a str,
    pub deployment_id: &'a str,
    /// The start event to begin at; `None` = the process's none start event.
    pub start_node: Option<&'a str>,
    pub variables: Map<String, Value>,
}

/// Start a new instance.
pub fn start(
    process: &Process,
    new: NewInstance<'_>,
    inputs: &Inputs,
) -> Result<Step, EngineError> {
    machine::Machine::start(process, new, inputs)
}

/// Resume an instance where a failed one stopped (`retry?mode=from-failure`):
/// a fresh instance with the failed one's variables and one token at `node`.
pub fn resume_at(
    process: &Process,
    new: NewInstance<'_>,
    node: &str,
    inputs: &Inputs,
) -> Result<Step, EngineError> {
    machine::Machine::resume_at(process, new, node, inputs)
}

/// Apply one event to an instance.
pub fn apply(
    process: &Process,
    snapshot: Snapshot,
    event: Event,
    inputs: &Inputs,
) -> Result<Step, EngineError> {
    machine::Machine::apply(process, snapshot, event, inputs)
}

/// [`apply`] without a copy of the snapshot kept for a refusal: an event the
/// engine never refuses once the process matches (an attempt's end, a fired
/// park, an arrived message or signal, a failed delivery) is applied on the
/// snapshot itself; any other event is applied on a copy. A refused event
/// hands the snapshot back unchanged. The runtime applies every attempt
/// outcome of a speculated window so: a copy per step was a copy of every
/// item of a fan-out per iteration (issue 29 item 1).
#[allow(clippy::result_large_err)]
pub fn apply_keeping(
    process: &Process,
    snapshot: Snapshot,
    event: Event,
    inputs: &Inputs,
) -> Result<Step, (EngineError, Snapshot)> {
    match machine::Machine::apply_unrefused(process, snapshot, event, inputs) {
        Ok(step) => Ok(step),
        Err((snapshot, event)) => match apply(process, snapshot.clone(), event, inputs) {
            Ok(step) => Ok(step),
            Err(e) => Err((e, snapshot)),
        },
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_documents;
#[cfg(test)]
mod tests_fanout;
