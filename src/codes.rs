//! The one table of codes.
//!
//! Every failure and diagnostic code Sutra emits is defined here, once, with its
//! wire string, its error class and its default retryability. Code elsewhere
//! matches on [`Code`]; the wire (JSON, CLI, database) shows [`Code::as_str`].
//!
//! Guest tasks may report codes of their own (`SUTRA.TASK.VALIDATION`,
//! `Api.Timeout`, ...): those travel as plain strings next to a [`Code`]-typed
//! engine code, never as new variants.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The error classes of the seed README: what a retry policy's `retryOn` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Transient,
    RateLimit,
    Timeout,
    InvalidInput,
    ResourceExhausted,
    Internal,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 6] = [
        ErrorClass::Transient,
        ErrorClass::RateLimit,
        ErrorClass::Timeout,
        ErrorClass::InvalidInput,
        ErrorClass::ResourceExhausted,
        ErrorClass::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::Timeout => "timeout",
            ErrorClass::InvalidInput => "invalid_input",
            ErrorClass::ResourceExhausted => "resource_exhausted",
            ErrorClass::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident => $s:literal, $class:ident, $retry:literal; )*) => {
        /// Every code Sutra itself emits. See the module docs.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in table order.
            pub const ALL: &'static [Code] = &[ $( Code::$variant, )* ];

            /// The stable wire string, e.g. `SUTRA.TASK.TRAP`.
            pub const fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $s, )* }
            }

            /// The error class a retry policy's `retryOn` sees.
            pub const fn class(self) -> ErrorClass {
                match self { $( Code::$variant => ErrorClass::$class, )* }
            }

            /// Whether a failure with this code is retried by default.
            pub const fn retryable(self) -> bool {
                match self { $( Code::$variant => $retry, )* }
            }

            /// The code for a wire string, if it is one of ours.
            pub fn parse(s: &str) -> Option<Code> {
                match s { $( $s => Some(Code::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    // ---- Task attempts (the sandbox) ----
    /// A guest `failure` with an empty code.
    TaskFailed => "SUTRA.TASK.FAILED", Internal, true;
    /// The guest trapped (a panic included).
    TaskTrap => "SUTRA.TASK.TRAP", Transient, true;
    /// The attempt ran out of fuel.
    TaskFuelExhausted => "SUTRA.TASK.FUEL_EXHAUSTED", ResourceExhausted, true;
    /// The attempt overran its wall-clock deadline.
    TaskDeadlineExceeded => "SUTRA.TASK.DEADLINE_EXCEEDED", Timeout, true;
    /// The attempt was stopped because its work was no longer wanted (its
    /// instance was cancelled, its token removed); its result is discarded.
    TaskInterrupted => "SUTRA.TASK.INTERRUPTED", Internal, false;
    /// The guest asked for more linear memory (or table space) than its cap.
    TaskMemoryLimit => "SUTRA.TASK.MEMORY_LIMIT", ResourceExhausted, true;
    /// The guest overflowed its stack.
    TaskStackOverflow => "SUTRA.TASK.STACK_OVERFLOW", ResourceExhausted, true;
    /// The host refused a call of the guest over one of its limits (more random
    /// bytes than a call may ask, a full resource table, a poll over too many
    /// pollables): the message carries the host's cause.
    TaskResourceExhausted => "SUTRA.TASK.RESOURCE_EXHAUSTED", ResourceExhausted, true;
    /// The guest's output was not JSON, or over the output cap. Not retried by
    /// default: the same task on the same input answers the same output.
    TaskOutputInvalid => "SUTRA.TASK.OUTPUT_INVALID", Internal, false;
    /// The guest's error code was over its cap (`sandbox::outcome::MAX_GUEST_CODE`
    /// bytes: a code is an identifier); the message says how long it was and how
    /// it began. The guest's class still decides whether a failure is retried.
    TaskErrorCodeInvalid => "SUTRA.TASK.ERROR_CODE_INVALID", Internal, true;
    /// The component failed validation or imports something outside the task world.
    TaskModuleInvalid => "SUTRA.TASK.MODULE_INVALID", InvalidInput, false;
    /// The task's input could not be built (e.g. variables are not JSON-encodable).
    TaskInputInvalid => "SUTRA.TASK.INPUT_INVALID", InvalidInput, false;
    /// The conventional code a guest uses for input it refuses.
    TaskValidation => "SUTRA.TASK.VALIDATION", InvalidInput, false;
    /// An outbound request of the attempt was refused by its egress policy
    /// (host or method not granted, address denied, secret not bound, the
    /// request cap): in the attempt's call record, and the code of an attempt
    /// that failed after one. Not retried: the same request meets the same policy.
    TaskEgressDenied => "SUTRA.TASK.EGRESS_DENIED", InvalidInput, false;

    // ---- Runtime (the engine) ----
    /// A retry budget was spent, or a non-retryable code was hit.
    RetryExhausted => "SUTRA.RUNTIME.RETRY.EXHAUSTED", Internal, false;
    /// A failed attempt on a task with no retry policy.
    RuntimeTaskFailed => "SUTRA.RUNTIME.TASK_FAILED", Internal, false;
    /// An exclusive gateway found no true condition and has no default flow.
    NoFlowTaken => "SUTRA.RUNTIME.GATEWAY.NO_FLOW_TAKEN", Internal, false;
    /// A condition failed to evaluate at run time (a type error, a missing variable).
    ConditionFailed => "SUTRA.RUNTIME.CONDITION.FAILED", InvalidInput, false;
    /// A condition or correlation key whose cost bound over the instance's
    /// variables is over the evaluation budget; it was not evaluated. Also a
    /// JSONata expression stopped at the same budget (steps, depth, memory).
    ConditionBudgetExceeded => "SUTRA.RUNTIME.CONDITION.BUDGET_EXCEEDED", InvalidInput, false;
    /// The instance was cancelled.
    Cancelled => "SUTRA.RUNTIME.CANCELLED", Internal, false;
    /// No instance with that id (or not visible to the caller).
    InstanceNotFound => "SUTRA.RUNTIME.INSTANCE_NOT_FOUND", InvalidInput, false;
    /// No active deployment of that process (or not visible to the caller).
    ProcessNotFound => "SUTRA.RUNTIME.PROCESS_NOT_FOUND", InvalidInput, false;
    /// The operation does not apply to the instance in its current state.
    InstanceState => "SUTRA.RUNTIME.INSTANCE_STATE", InvalidInput, false;
    /// A stored snapshot has a format version this build cannot read.
    SnapshotVersion => "SUTRA.RUNTIME.SNAPSHOT_VERSION", Internal, false;
    /// The task names a module that is not deployed.
    TaskNotRegistered => "SUTRA.RUNTIME.TASK_NOT_REGISTERED", InvalidInput, false;
    /// No waiting catch, boundary or message start matched a message.
    MessageNotCorrelated => "SUTRA.RUNTIME.MESSAGE.NOT_CORRELATED", InvalidInput, false;
    /// One step entered more nodes than the per-step budget (a loop with no wait state).
    StepLimit => "SUTRA.RUNTIME.STEP_LIMIT", Internal, false;
    /// A standard loop with no `loopMaximum` ran more iterations than the
    /// loop budget (`model::LOOP_LIMIT`): it ran away.
    LoopLimit => "SUTRA.RUNTIME.LOOP.LIMIT", Internal, false;
    /// A multi-instance body's `loopCardinality` or collection did not
    /// evaluate to a non-negative integer or an array.
    MultiInstanceInvalid => "SUTRA.RUNTIME.MULTI_INSTANCE.INVALID", InvalidInput, false;
    /// A variable path (`$.a.b`) could not be read or written.
    VariablePath => "SUTRA.RUNTIME.VARIABLE_PATH", InvalidInput, false;
    /// The task kind is not executable by this runtime (e.g. a channel call before the outbox exists).
    TaskKindUnsupported => "SUTRA.RUNTIME.TASK_KIND_UNSUPPORTED", InvalidInput, false;
    /// The store failed (I/O, constraint, connection).
    StoreFailed => "SUTRA.RUNTIME.STORE", Transient, true;
    /// A channel call's route-less timeout fired before the response.
    ChannelCallTimeout => "SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT", Timeout, true;
    /// A response arrived for a superseded channel-call attempt.
    ChannelCallRetryPending => "SUTRA.DISPATCH.CHANNEL_CALL.RETRY_PENDING", Transient, true;
    /// No channel call of the caller waits for that correlation (or request) on that channel.
    ChannelCallNotFound => "SUTRA.DISPATCH.CHANNEL_CALL.NOT_FOUND", InvalidInput, false;
    /// A deployment calls a channel its tenant has not configured.
    ChannelNotConfigured => "SUTRA.RUNTIME.CHANNEL.NOT_CONFIGURED", InvalidInput, false;
    /// No channel of that name (or not visible to the caller).
    ChannelNotFound => "SUTRA.RUNTIME.CHANNEL.NOT_FOUND", InvalidInput, false;
    /// A channel a live deployment calls cannot be deleted.
    ChannelInUse => "SUTRA.RUNTIME.CHANNEL.IN_USE", InvalidInput, false;
    /// A channel's settings are invalid (name, transport, URL).
    ChannelInvalid => "SUTRA.RUNTIME.CHANNEL.INVALID", InvalidInput, false;
    /// A push URL names a host outside `sutra.outbox.allowed-hosts`.
    OutboundHostNotAllowed => "SUTRA.OUTBOUND.HOST_NOT_ALLOWED", InvalidInput, false;
    /// No external task with that id (or not visible to the caller).
    ExternalTaskNotFound => "SUTRA.RUNTIME.EXTERNAL_TASK.NOT_FOUND", InvalidInput, false;
    /// The worker does not hold the external task's lock (it expired, another worker has it, or the task is over).
    ExternalTaskLockLost => "SUTRA.RUNTIME.EXTERNAL_TASK.LOCK_LOST", InvalidInput, false;
    /// An external-task worker reported a failure of the task it held (the
    /// code of its `worker_failed` row in an instance's attempts). Transient:
    /// the task is fetchable again after the worker's retry timeout while
    /// worker retries are left, then an incident; the call's `q:retry`
    /// budget is never spent.
    ExternalTaskFailed => "SUTRA.RUNTIME.EXTERNAL_TASK.FAILED", Transient, true;
    /// No incident with that id (or not visible to the caller).
    IncidentNotFound => "SUTRA.RUNTIME.INCIDENT.NOT_FOUND", InvalidInput, false;
    /// The incident is resolved already.
    IncidentResolved => "SUTRA.RUNTIME.INCIDENT.RESOLVED", InvalidInput, false;
    /// No batch operation with that id (or not visible to the caller).
    BatchNotFound => "SUTRA.RUNTIME.BATCH.NOT_FOUND", InvalidInput, false;
    /// A batch operation's selection is larger than one batch may hold.
    BatchTooLarge => "SUTRA.RUNTIME.BATCH.TOO_LARGE", InvalidInput, false;
    /// The batch operation has ended (COMPLETED or CANCELLED) already.
    BatchEnded => "SUTRA.RUNTIME.BATCH.ENDED", InvalidInput, false;
    /// A migration target that is not a deployment of the instance's process.
    MigrationTargetInvalid => "SUTRA.RUNTIME.MIGRATION.TARGET_INVALID", InvalidInput, false;
    /// A token's (or the failed) node has no counterpart in the migration target.
    MigrationUnmappedNode => "SUTRA.RUNTIME.MIGRATION.UNMAPPED_NODE", InvalidInput, false;
    /// The outbox gave up on a delivery (the poison ceiling).
    DeliveryAttemptsExhausted => "SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED", Transient, true;
    /// A tenant quota was exceeded.
    QuotaExceeded => "SUTRA.TENANT.QUOTA_EXCEEDED", RateLimit, true;
    /// No tenant of that name.
    TenantNotFound => "SUTRA.TENANT.NOT_FOUND", InvalidInput, false;
    /// A tenant of that name exists already.
    TenantExists => "SUTRA.TENANT.EXISTS", InvalidInput, false;
    /// No API key with that id among the tenant's keys (revoked already, or another tenant's).
    TenantKeyNotFound => "SUTRA.TENANT.KEY_NOT_FOUND", InvalidInput, false;
    /// An `Idempotency-Key` used before with a different request (another
    /// process, start event or variables): refused, never replayed.
    IdempotencyKeyReused => "SUTRA.RUNTIME.IDEMPOTENCY_KEY_REUSED", InvalidInput, false;
    /// No deployment with that id (or not visible to the caller).
    DeploymentNotFound => "SUTRA.RUNTIME.DEPLOYMENT_NOT_FOUND", InvalidInput, false;
    /// A compensator failed (its retries spent, a business error, a timeout):
    /// the unwind goes on and the instance ends FAILED, not COMPENSATED.
    CompensationFailed => "SUTRA.RUNTIME.COMPENSATION.FAILED", Internal, false;
    /// A node that joins `all` of its incoming edges has one that can never be
    /// satisfied (its guard was false, or its source was skipped or failed).
    JoinDeadEdge => "SUTRA.RUNTIME.JOIN.DEAD_EDGE", Internal, false;
    /// A child flow (InvokeFlow, a process call) names a process with no
    /// ACTIVE deployment in the caller's tenant.
    ChildProcessNotFound => "SUTRA.RUNTIME.CHILD.PROCESS_NOT_FOUND", InvalidInput, false;
    /// A child flow would be nested deeper than child flows may nest.
    ChildDepthExceeded => "SUTRA.RUNTIME.CHILD.DEPTH_EXCEEDED", InvalidInput, false;
    /// A start's input is not a JSON object, and the process (BPMN, HX) starts with an
    /// object of variables; only a States-language execution takes any JSON value.
    InstanceInputInvalid => "SUTRA.RUNTIME.INSTANCE.INPUT_INVALID", InvalidInput, false;
    /// The input of a child flow is not a JSON object (the child's variables).
    ChildInputInvalid => "SUTRA.RUNTIME.CHILD.INPUT_INVALID", InvalidInput, false;
    /// The child instance was cancelled by somebody else than its parent.
    ChildTerminated => "SUTRA.RUNTIME.CHILD.TERMINATED", Internal, false;
    /// A BPMN error end event without `errorRef` threw an unnamed error: only
    /// a catch-all error boundary (one without `errorRef`) catches it;
    /// uncaught, the instance fails with this code.
    BpmnUnnamedError => "SUTRA.RUNTIME.BPMN.UNNAMED_ERROR", Internal, false;
    /// A child flow outlived its call's timeout (it is cancelled).
    ChildTimeout => "SUTRA.RUNTIME.CHILD.TIMEOUT", Timeout, true;

    // ---- The HTTP API ----
    /// The request is malformed: bad JSON, an unknown field, a bad path id or query, a bundle without a definition.
    ApiMalformed => "SUTRA.API.MALFORMED_REQUEST", InvalidInput, false;
    /// No valid bearer key.
    ApiUnauthorized => "SUTRA.API.UNAUTHORIZED", InvalidInput, false;
    /// The key is valid but may not use this route (a tenant key on an admin route).
    ApiForbidden => "SUTRA.API.FORBIDDEN", InvalidInput, false;
    /// No such route.
    ApiNotFound => "SUTRA.API.NOT_FOUND", InvalidInput, false;
    /// The route exists but not with this method.
    ApiMethodNotAllowed => "SUTRA.API.METHOD_NOT_ALLOWED", InvalidInput, false;
    /// The body (or a multipart part) is over its size cap.
    ApiPayloadTooLarge => "SUTRA.API.PAYLOAD_TOO_LARGE", InvalidInput, false;
    /// The body's content type is not the one the route takes.
    ApiUnsupportedMediaType => "SUTRA.API.UNSUPPORTED_MEDIA_TYPE", InvalidInput, false;
    /// The request target (path and query) is longer than the server reads.
    ApiUriTooLong => "SUTRA.API.URI_TOO_LONG", InvalidInput, false;
    /// The request's header section is too large (too many headers, or too many bytes).
    ApiHeadersTooLarge => "SUTRA.API.HEADERS_TOO_LARGE", InvalidInput, false;
    /// The server holds as many connections as it takes (in all, or from this
    /// source address): the connection is answered 503 at once and closed.
    ApiTooManyConnections => "SUTRA.API.TOO_MANY_CONNECTIONS", RateLimit, true;
    /// The server failed; the details are in its log, never in the answer.
    ApiInternal => "SUTRA.API.INTERNAL", Internal, true;

    // ---- Configuration and load-time diagnostics ----
    /// A stateful process was started without a datasource.
    DatasourceRequired => "SUTRA.CONFIG.DATASOURCE_REQUIRED", InvalidInput, false;
    /// A command that only reads was given a SQLite file that does not exist.
    DatasourceMissing => "SUTRA.CONFIG.DATASOURCE_MISSING", InvalidInput, false;
    /// A configuration key has a bad value.
    ConfigInvalid => "SUTRA.CONFIG.INVALID", InvalidInput, false;
    /// A timer expression is not well-formed ISO 8601.
    TimerMalformed => "SUTRA.CONFIG.TIMER.MALFORMED", InvalidInput, false;
    /// A timer expression is well-formed but not supported (P1M, P1Y, cron).
    TimerUnsupported => "SUTRA.CONFIG.TIMER.UNSUPPORTED", InvalidInput, false;
    /// A condition expression does not parse.
    ConditionSyntax => "SUTRA.CONFIG.CONDITION.SYNTAX", InvalidInput, false;
    /// A condition parses but can never be evaluated: a part of it that names
    /// no variable fails (`1 + "a"`), or it names no variable and is not a boolean.
    ConditionInvalid => "SUTRA.CONFIG.CONDITION.INVALID", InvalidInput, false;
    /// A definition file could not be read (missing, unreadable, not text).
    FileUnreadable => "SUTRA.CONFIG.FILE_UNREADABLE", InvalidInput, false;
    /// The document is not well-formed XML.
    XmlMalformed => "SUTRA.CONFIG.XML.MALFORMED", InvalidInput, false;
    /// The document uses a DTD or entity declarations (refused outright).
    XmlDtdForbidden => "SUTRA.CONFIG.XML.DTD_FORBIDDEN", InvalidInput, false;
    /// The document exceeds a size, depth or attribute-length limit.
    XmlLimitExceeded => "SUTRA.CONFIG.XML.LIMIT_EXCEEDED", InvalidInput, false;
    /// The document is not a BPMN definitions document.
    BpmnNotDefinitions => "SUTRA.CONFIG.BPMN.NOT_DEFINITIONS", InvalidInput, false;
    /// The document has no process.
    BpmnNoProcess => "SUTRA.CONFIG.BPMN.NO_PROCESS", InvalidInput, false;
    /// A retry policy that could never apply (channel call without route-less
    /// timeout; a routed timer boundary alongside a retry policy).
    BpmnRetryNotApplicable => "SUTRA.CONFIG.BPMN.RETRY_NOT_APPLICABLE", InvalidInput, false;
    /// A start event with both `q:source` and a timer.
    BpmnAmbiguousStart => "SUTRA.CONFIG.BPMN.AMBIGUOUS_START", InvalidInput, false;
    /// An element Sutra cannot execute inside an executable process.
    BpmnUnsupportedElement => "SUTRA.CONFIG.BPMN.UNSUPPORTED_ELEMENT", InvalidInput, false;
    /// Two elements share an id.
    BpmnDuplicateId => "SUTRA.CONFIG.BPMN.DUPLICATE_ID", InvalidInput, false;
    /// A reference names an element that does not exist.
    BpmnDanglingReference => "SUTRA.CONFIG.BPMN.DANGLING_REFERENCE", InvalidInput, false;
    /// An executable process (or sub-process) without a start event.
    BpmnNoStartEvent => "SUTRA.CONFIG.BPMN.NO_START_EVENT", InvalidInput, false;
    /// A node no start event reaches.
    BpmnUnreachableNode => "SUTRA.CONFIG.BPMN.UNREACHABLE_NODE", InvalidInput, false;
    /// A gateway that can get stuck (a join fed by an exclusive split, a
    /// gateway without outgoing flows, ...).
    BpmnGatewayStuck => "SUTRA.CONFIG.BPMN.GATEWAY_STUCK", InvalidInput, false;
    /// A boundary event attached to nothing (or to something that is not an activity).
    BpmnBoundaryUnattached => "SUTRA.CONFIG.BPMN.BOUNDARY_UNATTACHED", InvalidInput, false;
    /// An attribute is missing or has a bad value.
    BpmnInvalidAttribute => "SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE", InvalidInput, false;
    /// A service task's implementation is neither `registered:<name>` nor `channel:<name>`.
    BpmnInvalidImplementation => "SUTRA.CONFIG.BPMN.INVALID_IMPLEMENTATION", InvalidInput, false;
    /// A node that cannot complete the flow (no outgoing flow where one is needed).
    BpmnDeadEnd => "SUTRA.CONFIG.BPMN.DEAD_END", InvalidInput, false;
    /// A sequence flow that cannot exist: into a start or boundary event, out of
    /// an end event, or across a sub-process boundary.
    BpmnInvalidFlow => "SUTRA.CONFIG.BPMN.INVALID_FLOW", InvalidInput, false;
    /// Info: a foreign extension (camunda:, zeebe:, ...) on an executable element is ignored.
    BpmnForeignExtension => "SUTRA.CONFIG.BPMN.FOREIGN_EXTENSION_IGNORED", InvalidInput, false;
    /// Info: a process is not executable and loads for inspection only.
    BpmnNotExecutable => "SUTRA.CONFIG.BPMN.NOT_EXECUTABLE", InvalidInput, false;
    /// A conditional start event of a process: refused (docs/bpmn.md says
    /// why; conditional catches, boundaries and event sub-process starts run).
    BpmnConditionalUnsupported => "SUTRA.CONFIG.BPMN.CONDITIONAL_UNSUPPORTED", InvalidInput, false;
    /// A transaction sub-process or a cancel event: refused (docs/bpmn.md says why).
    BpmnTransactionUnsupported => "SUTRA.CONFIG.BPMN.TRANSACTION_UNSUPPORTED", InvalidInput, false;

    // ---- The HX dialect (HX-*; seed 002) ----
    /// The document is not an HX workflow (the root is not `<workflow>`, or it has no id).
    HxNotWorkflow => "HX-1001", InvalidInput, false;
    /// An element HX does not define at that place (or one that may appear only once, repeated).
    HxUnknownElement => "HX-1002", InvalidInput, false;
    /// An attribute HX does not define on that element.
    HxUnknownAttribute => "HX-1003", InvalidInput, false;
    /// A required attribute is missing, or an attribute has a bad value.
    HxInvalidAttribute => "HX-1004", InvalidInput, false;
    /// Two nodes share an id.
    HxDuplicateId => "HX-2001", InvalidInput, false;
    /// An edge (or `compensates`) names a node that does not exist.
    HxDanglingEdge => "HX-2002", InvalidInput, false;
    /// The control, data and error edges form a cycle.
    HxCycle => "HX-2003", InvalidInput, false;
    /// `compensates` disagrees with the compensation edge.
    HxCompensatesMismatch => "HX-2004", InvalidInput, false;
    /// A compensator is reachable by forward (control, data or error) edges.
    HxCompensatorReachable => "HX-2005", InvalidInput, false;
    /// An edge that cannot be executed as written: a duplicate, a guard on a
    /// non-control edge, an error or compensation edge between the wrong kinds
    /// of node, a second compensator, a compensator with edges of its own.
    HxInvalidEdge => "HX-2006", InvalidInput, false;
    /// A workflow without nodes.
    HxEmptyWorkflow => "HX-2007", InvalidInput, false;
    /// A `join="all"` node fed by edges that are never all taken (both arms of
    /// an if/else, a task's error edge and its success path): the join can
    /// never run (`join="any"` is what was meant).
    HxJoinUnsatisfiable => "HX-2008", InvalidInput, false;
    /// A node `type` HX does not know.
    HxUnknownNodeType => "HX-3001", InvalidInput, false;
    /// A `<retry>` with a bad value (maxAttempts, backoff, multiplier, jitter, retryOn).
    HxInvalidRetry => "HX-3101", InvalidInput, false;
    /// A `<timeout>` with a bad value (onTimeout).
    HxInvalidTimeout => "HX-3201", InvalidInput, false;
    /// `idempotent="false"` together with a `<retry>` policy.
    HxNonIdempotentRetry => "HX-3301", InvalidInput, false;
    /// A duration with months or years (well-formed, but its length is not fixed), or a cron string.
    HxDurationUnsupported => "HX-3401", InvalidInput, false;
    /// A duration or date-time that is not well-formed ISO 8601.
    HxDurationMalformed => "HX-3402", InvalidInput, false;

    // ---- The States language (States.*; seed 004) ----
    /// The document is not well-formed JSON (or uses JSON extensions: comments, trailing commas).
    StatesJsonMalformed => "SUTRA.CONFIG.STATES.JSON_MALFORMED", InvalidInput, false;
    /// The document exceeds a size, nesting-depth or count limit.
    StatesLimitExceeded => "SUTRA.CONFIG.STATES.LIMIT_EXCEEDED", InvalidInput, false;
    /// An object has the same key twice.
    StatesDuplicateKey => "SUTRA.CONFIG.STATES.DUPLICATE_KEY", InvalidInput, false;
    /// The JSON top level is not a state machine (`StartAt` and `States`).
    StatesNotAStateMachine => "SUTRA.CONFIG.STATES.NOT_A_STATE_MACHINE", InvalidInput, false;
    /// A required field is missing.
    StatesMissingField => "SUTRA.CONFIG.STATES.MISSING_FIELD", InvalidInput, false;
    /// A field the state (or rule, retrier, catcher) does not have.
    StatesUnknownField => "SUTRA.CONFIG.STATES.UNKNOWN_FIELD", InvalidInput, false;
    /// A field has a value of the wrong type or out of range.
    StatesInvalidField => "SUTRA.CONFIG.STATES.INVALID_FIELD", InvalidInput, false;
    /// Fields that exclude each other (`Next` and `End`, `Seconds` and `SecondsPath`, ...).
    StatesConflictingFields => "SUTRA.CONFIG.STATES.CONFLICTING_FIELDS", InvalidInput, false;
    /// A path, payload template or intrinsic function call does not parse.
    StatesInvalidPath => "SUTRA.CONFIG.STATES.INVALID_PATH", InvalidInput, false;
    /// A JSONata expression is not `{% ... %}` or does not parse.
    StatesJsonataSyntax => "SUTRA.CONFIG.STATES.JSONATA_SYNTAX", InvalidInput, false;
    /// `StartAt`, `Next` or `Default` names no state of its scope.
    StatesUnknownState => "SUTRA.CONFIG.STATES.UNKNOWN_STATE", InvalidInput, false;
    /// Two states share a name (names are unique across the whole machine).
    StatesDuplicateState => "SUTRA.CONFIG.STATES.DUPLICATE_STATE", InvalidInput, false;
    /// A state no transition reaches.
    StatesUnreachableState => "SUTRA.CONFIG.STATES.UNREACHABLE_STATE", InvalidInput, false;
    /// A state machine (or branch) with no terminal state.
    StatesNoTerminalState => "SUTRA.CONFIG.STATES.NO_TERMINAL_STATE", InvalidInput, false;
    /// `ErrorEquals` is empty, or `States.ALL` is not alone in the last retrier/catcher.
    StatesInvalidErrorEquals => "SUTRA.CONFIG.STATES.INVALID_ERROR_EQUALS", InvalidInput, false;
    /// Well-formed States language that Sutra does not run (JSONata, distributed Map, ...): the message names the field.
    StatesUnsupported => "SUTRA.CONFIG.STATES.UNSUPPORTED", InvalidInput, false;
    /// A warning: a Map names neither `FailOnPartial` nor a tolerated-failure field, so seed 004's
    /// default applies (failed items are recorded, the flow goes on) where Step Functions fails the Map.
    StatesMapPartialDefault => "SUTRA.CONFIG.STATES.MAP_PARTIAL_DEFAULT", InvalidInput, false;
    /// No instance waits for that event (unknown event name, or the instance is not waiting).
    EventNotAwaited => "SUTRA.RUNTIME.EVENT.NOT_AWAITED", InvalidInput, false;
    /// A link throw event whose name no link catch of its scope has, or two
    /// link catches of one scope with the same name.
    BpmnLinkUnmatched => "SUTRA.CONFIG.BPMN.LINK_UNMATCHED", InvalidInput, false;
    /// A catch event with `parallelMultiple="true"` (all its definitions
    /// must fire): not supported.
    BpmnParallelMultiple => "SUTRA.CONFIG.BPMN.PARALLEL_MULTIPLE_UNSUPPORTED", InvalidInput, false;
    /// An event-based gateway whose flow leads to something else than a
    /// message, timer or signal catch or a receive task, or that has fewer
    /// than two such flows.
    BpmnEventGatewayInvalid => "SUTRA.CONFIG.BPMN.EVENT_GATEWAY_INVALID", InvalidInput, false;
    /// An instantiating event-based gateway (`instantiate="true"`, or one
    /// starting a process): not supported.
    BpmnEventGatewayInstantiate => "SUTRA.CONFIG.BPMN.EVENT_GATEWAY_INSTANTIATE_UNSUPPORTED", InvalidInput, false;

    /// Error names raised at run time (seed 004's table).
    /// Wildcard in `ErrorEquals`: matches every error.
    StatesAll => "States.ALL", Internal, false;
    /// Matches any task failure except `States.Timeout`.
    StatesTaskFailed => "States.TaskFailed", Internal, true;
    /// A task attempt ran past its `TimeoutSeconds`.
    StatesTimeout => "States.Timeout", Timeout, true;
    /// A Choice had no matching rule and no `Default`.
    StatesNoChoiceMatched => "States.NoChoiceMatched", Internal, false;
    /// A Map's `ItemsPath` did not resolve to an array.
    StatesItemsNotArray => "States.ItemsNotArray", InvalidInput, false;
    /// A path did not resolve, or a value had the wrong type (`InputPath`, `OutputPath`, ...).
    StatesRuntime => "States.Runtime", InvalidInput, false;
    /// A `.$` path of a payload template did not resolve.
    StatesParameterPathFailure => "States.ParameterPathFailure", InvalidInput, false;
    /// A result could not be placed at its `ResultPath`.
    StatesResultPathMatchFailure => "States.ResultPathMatchFailure", InvalidInput, false;
    /// An intrinsic function failed (a bad argument).
    StatesIntrinsicFailure => "States.IntrinsicFailure", InvalidInput, false;
    /// A Parallel branch or Map iteration failed.
    StatesBranchFailed => "States.BranchFailed", Internal, false;
    /// More iterations of a Map failed than its `ToleratedFailureCount` / `ToleratedFailurePercentage` allow.
    StatesExceedToleratedFailureThreshold => "States.ExceedToleratedFailureThreshold", Internal, false;
    /// A Fail state that names no `Error`.
    StatesFail => "States.Fail", Internal, false;
    /// A JSONata expression failed to evaluate, or yielded a value of the wrong type.
    StatesQueryEvaluationError => "States.QueryEvaluationError", InvalidInput, false;
    /// A task returned a failure without a specific code.
    ActionFailed => "ActionFailed", Internal, true;
    /// A `Resource` names no deployed module.
    ResourceNotFound => "ResourceNotFound", InvalidInput, false;

    // ---- HTTP tasks (issue 31: seed 004's CALL_API names; see runtime::http_task) ----
    /// The API answered 4xx (an outcome of 408 or 429 carries the class `rate_limit`).
    ApiHttpClientError => "Api.HttpClientError", InvalidInput, false;
    /// The API answered 5xx.
    ApiHttpServerError => "Api.HttpServerError", Transient, true;
    /// No answer before the connect or first-byte timeout, or the body did not end in time.
    ApiTimeout => "Api.Timeout", Timeout, true;
    /// The connection was refused (by the host: transient) or denied (by the egress policy or the
    /// address checks: an outcome of class `invalid_input`, not retried by default).
    ApiRefused => "Api.Refused", Transient, true;
    /// The task names a connection the tenant does not have.
    CredentialNotFound => "Credential.NotFound", InvalidInput, false;
    /// The connection's sealed material cannot be opened (no `sutra.secret.key`, a retired key).
    CredentialUnavailable => "Credential.Unavailable", Internal, false;
    /// The OAuth 2 token endpoint refused the client, answered no token, or could not be reached.
    CredentialTokenFailed => "Credential.TokenFailed", Transient, true;
    /// The task's input does not form a request (no `ApiEndpoint`, a header that is no string,
    /// ...), or a response declared JSON does not parse.
    MapperFailure => "Mapper.Failure", InvalidInput, false;
    /// An HTTP task's definition is wrong (an unknown field, a bad method, no endpoint); at load.
    StatesHttpTaskInvalid => "SUTRA.CONFIG.STATES.HTTP_TASK", InvalidInput, false;
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Code::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown code {s}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn wire_strings_are_unique_and_round_trip() {
        let mut seen = HashSet::new();
        for &c in Code::ALL {
            assert!(
                seen.insert(c.as_str()),
                "duplicate wire string {}",
                c.as_str()
            );
            assert_eq!(Code::parse(c.as_str()), Some(c));
            // Sutra's own codes, the HX codes (HX-NNNN, seed 002) and the States
            // language's public error names (seed 004).
            let s = c.as_str();
            let hx = s
                .strip_prefix("HX-")
                .is_some_and(|n| n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()));
            assert!(
                s.starts_with("SUTRA.")
                    || hx
                    || s.starts_with("States.")
                    || ["Api.", "Credential.", "Mapper."]
                        .iter()
                        .any(|p| s.starts_with(p))
                    || matches!(c, Code::ActionFailed | Code::ResourceNotFound),
                "{c}"
            );
        }
    }

    #[test]
    fn trap_classes_are_retryable_and_module_invalid_is_not() {
        for c in [
            Code::TaskTrap,
            Code::TaskFuelExhausted,
            Code::TaskDeadlineExceeded,
            Code::TaskMemoryLimit,
            Code::TaskStackOverflow,
        ] {
            assert!(c.retryable(), "{c}");
        }
        assert!(!Code::TaskModuleInvalid.retryable());
        assert_eq!(Code::TaskTrap.class(), ErrorClass::Transient);
        assert_eq!(Code::TaskDeadlineExceeded.class(), ErrorClass::Timeout);
        assert_eq!(
            Code::TaskFuelExhausted.class(),
            ErrorClass::ResourceExhausted
        );
    }

    #[test]
    fn classes_parse() {
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(ErrorClass::parse("nope"), None);
    }
}
