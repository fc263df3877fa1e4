//! The token walk: entering nodes, leaving them along flows, scopes, joins,
//! and the terminal stamp. Timers, message waits, boundaries and fired parks
//! are in `parks.rs`; attempt outcomes are judged in `outcome.rs`; process
//! calls (child flows) in `child.rs`; join rules, dead paths and error
//! flows in `flow.rs`; compensation (the unwind) in `unwind.rs`.

use super::snapshot::{NodeState, TaskPhase, TaskState};
use super::{
    vars, AttemptRequest, EngineError, Event, Inputs, InstanceError, InstanceState, JournalEntry,
    NewInstance, Park, ParkKind, Snapshot, Step, Token, TokenStatus, SNAPSHOT_FORMAT,
};
use super::{Cause, Effect};
use crate::codes::Code;
use crate::model::{
    BoundaryTrigger, EndKind, FlowIx, Node, NodeIx, NodeKind, Process, StartTrigger, TaskImpl,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;

/// Node entries allowed in one step: a loop with no wait state fails the
/// instance with `SUTRA.RUNTIME.STEP_LIMIT` instead of spinning forever.
pub(super) const STEP_BUDGET: u32 = 10_000;

pub(super) struct Machine<'a> {
    pub(super) process: &'a Process,
    pub(super) snap: Snapshot,
    pub(super) effects: Vec<Effect>,
    pub(super) inputs: &'a Inputs,
    pub(super) queue: VecDeque<u64>,
    budget: u32,
    /// Signals thrown in this step, for the instance's own waits armed
    /// later in it (engine/signal.rs).
    pub(super) thrown: Vec<super::signal::OwnThrow>,
    /// Fan-out iterations started in this step (engine/fanout.rs: past
    /// `FANOUT_STARTS_PER_STEP` the rest wait for the next step).
    pub(super) fanout_starts: u32,
    /// Which nodes may read the execution input through the context
    /// (engine/context_reads.rs), by node index, found once per step.
    pub(super) input_readers: std::cell::RefCell<std::collections::HashMap<NodeIx, bool>>,
}

/// A raised error travelling up the scopes to an error boundary.
pub(super) struct Raised {
    pub code: String,
    pub message: String,
    pub details: Option<Value>,
    /// A spent retry budget (only boundaries with `catch_failures` catch it).
    pub failure: Option<Cause>,
    /// Further names the error answers to (a node's `task_failure_name`).
    pub also: Vec<String>,
}

impl<'a> Machine<'a> {
    fn new(process: &'a Process, snap: Snapshot, inputs: &'a Inputs) -> Self {
        Machine {
            process,
            snap,
            effects: Vec::new(),
            inputs,
            queue: VecDeque::new(),
            budget: STEP_BUDGET,
            thrown: Vec::new(),
            fanout_starts: 0,
            input_readers: Default::default(),
        }
    }

    /// A new instance's first snapshot; its variables are moved in (and
    /// copied once, as the instance's input).
    fn fresh_snapshot(process: &Process, new: NewInstance<'_>, now: DateTime<Utc>) -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            instance_id: new.instance_id.to_string(),
            tenant: new.tenant.to_string(),
            deployment_id: new.deployment_id.to_string(),
            process_id: process.id.clone(),
            state: InstanceState::Running,
            input: new.variables.clone(),
            variables: new.variables,
            tokens: Vec::new(),
            parks: Default::default(),
            next_token: 1,
            next_park: 1,
            next_journal: 1,
            completed: Vec::new(),
            node_states: Default::default(),
            outputs: Default::default(),
            joins: Vec::new(),
            unwind: None,
            error: None,
            started_at: now,
            ended_at: None,
            parent: None,
            assigned: Default::default(),
            escalations: Vec::new(),
            held: Default::default(),
            elided: Default::default(),
        }
    }

    pub(super) fn start(
        process: &'a Process,
        new: NewInstance<'_>,
        inputs: &'a Inputs,
    ) -> Result<Step, EngineError> {
        if !process.executable {
            return Err(EngineError::new(
                Code::InstanceState,
                format!("process `{}` is not executable", process.id),
            ));
        }
        let start = match new.start_node {
            Some(id) => process
                .find(id)
                .filter(|n| n.scope.is_none() && matches!(n.kind, NodeKind::Start(_)))
                .ok_or_else(|| EngineError::new(Code::InstanceState, format!("`{id}` is not a start event of `{}`", process.id)))?,
            None => process
                .starts_in(None)
                .find(|n| matches!(n.kind, NodeKind::Start(StartTrigger::None)))
                .ok_or_else(|| {
                    EngineError::new(
                        Code::InstanceState,
                        format!("process `{}` has no none start event: it starts by message or schedule", process.id),
                    )
                })?,
        };
        let wrapped =
            new.variables.len() == 1 && new.variables.contains_key(super::document::INPUT_KEY);
        if wrapped && start.data.is_none() {
            // Only a start with a data flow (a States-language machine) takes a document.
            return Err(EngineError::new(
                Code::InstanceInputInvalid,
                format!(
                    "process `{}` starts with a JSON object of variables (a BPMN or HX process names its inputs); only a States-language execution takes any JSON value as its input",
                    process.id
                ),
            ));
        }
        let snap = Self::fresh_snapshot(process, new, inputs.now);
        let mut m = Machine::new(process, snap, inputs);
        journal!(
            m,
            "instance_started",
            Some(&start.id),
            json!({ "variables": m.snap.input }),
        );
        let doc = start
            .data
            .as_ref()
            .map(|_| super::document::input_document(&m.snap.input));
        m.spawn_doc(start.ix, None, None, doc);
        m.arm_event_subs(None, None);
        m.run();
        Ok(m.finish())
    }

    pub(super) fn resume_at(
        process: &'a Process,
        new: NewInstance<'_>,
        node: &str,
        inputs: &'a Inputs,
    ) -> Result<Step, EngineError> {
        // A failure inside a sub-process or branch resumes at its top-level state.
        let mut n = process.find(node);
        while let Some(s) = n.and_then(|x| x.scope) {
            n = Some(process.node(s));
        }
        let n = n.filter(|n| n.scope.is_none()).ok_or_else(|| {
            EngineError::new(
                Code::InstanceState,
                format!("cannot resume at `{node}`: not a top-level node"),
            )
        })?;
        if let Some(why) = super::flow::resume_blocker(process, n.ix) {
            return Err(EngineError::new(
                Code::InstanceState,
                format!("cannot resume at `{node}`: {why}; retry with mode=full"),
            ));
        }
        let snap = Self::fresh_snapshot(process, new, inputs.now);
        let mut m = Machine::new(process, snap, inputs);
        journal!(m, "instance_resumed", Some(node), json!({}));
        let doc = n.data.as_ref().map(|_| Value::Object(m.snap.input.clone()));
        m.spawn_doc(n.ix, None, None, doc);
        m.arm_event_subs(None, None);
        m.run();
        Ok(m.finish())
    }

    pub(super) fn apply(
        process: &'a Process,
        snap: Snapshot,
        event: Event,
        inputs: &'a Inputs,
    ) -> Result<Step, EngineError> {
        if snap.process_id != process.id {
            return Err(EngineError::new(
                Code::SnapshotVersion,
                format!(
                    "snapshot is of process `{}`, not `{}`",
                    snap.process_id, process.id
                ),
            ));
        }
        let terminal = snap.state.is_terminal();
        let mut m = Machine::new(process, snap, inputs);
        match event {
            Event::Cancel { reason } => {
                if terminal {
                    return Err(EngineError::new(
                        Code::InstanceState,
                        format!("instance is already {}", m.snap.state.as_str()),
                    ));
                }
                journal!(m, "instance_cancelled", None, json!({ "reason": reason }));
                m.end(InstanceState::Terminated);
            }
            Event::Resume => m.resume()?,
            Event::EditVariables { set, unset, by } => m.edit_variables(set, unset, by)?,
            Event::ChildEnded { .. } if terminal => {
                return Err(EngineError::new(
                    Code::InstanceState,
                    format!(
                        "instance is {}: no process call awaits a child",
                        m.snap.state.as_str()
                    ),
                ))
            }
            Event::ChannelAnswered { .. } if terminal => {
                return Err(EngineError::new(
                    Code::ChannelCallNotFound,
                    format!(
                        "instance is {}: no channel call waits",
                        m.snap.state.as_str()
                    ),
                ))
            }
            _ if terminal => {
                journal!(
                    m,
                    "event_ignored",
                    None,
                    json!({ "reason": "instance is terminal" }),
                );
            }
            e @ (Event::AttemptEnded { .. }
            | Event::DeliveryFailed { .. }
            | Event::ParkFired { .. }
            | Event::MessageArrived { .. }
            | Event::SignalArrived { .. }) => m.unrefused(e),
            Event::ChannelAnswered {
                token,
                channel,
                sent,
                outcome,
            } => m.channel_answered(token, &channel, sent, outcome)?,
            Event::ChildEnded { park, outcome } => m.child_ended(park, outcome)?,
        }
        m.run();
        Ok(m.finish())
    }

    /// [`Machine::apply`] of an event it never refuses once the process
    /// matches (engine::apply_keeping); any other event, or another
    /// process's snapshot, is handed back untouched.
    #[allow(clippy::result_large_err)]
    pub(super) fn apply_unrefused(
        process: &'a Process,
        snap: Snapshot,
        event: Event,
        inputs: &'a Inputs,
    ) -> Result<Step, (Snapshot, Event)> {
        let unrefused = matches!(
            event,
            Event::AttemptEnded { .. }
                | Event::DeliveryFailed { .. }
                | Event::ParkFired { .. }
                | Event::MessageArrived { .. }
                | Event::SignalArrived { .. }
        );
        if !unrefused || snap.process_id != process.id {
            return Err((snap, event));
        }
        let terminal = snap.state.is_terminal();
        let mut m = Machine::new(process, snap, inputs);
        if terminal {
            journal!(
                m,
                "event_ignored",
                None,
                json!({ "reason": "instance is terminal" }),
            );
        } else {
            m.unrefused(event);
        }
        m.run();
        Ok(m.finish())
    }

    /// The events [`Machine::apply`] never refuses, applied.
    fn unrefused(&mut self, event: Event) {
        match event {
            Event::AttemptEnded {
                token,
                attempt,
                outcome,
            } => self.attempt_ended(token, attempt, outcome),
            Event::DeliveryFailed {
                token,
                request,
                message,
            } => self.delivery_failed(token, &request, message),
            Event::ParkFired { park } => self.park_fired(park, Map::new()),
            Event::MessageArrived { park, variables } => self.park_fired(park, variables),
            Event::SignalArrived { park, variables } => self.signal_arrived(park, variables),
            _ => {}
        }
    }

    /// Settle the instance state and hand back the step.
    fn finish(mut self) -> Step {
        if !self.snap.state.is_terminal() {
            let running = self.snap.tokens.iter().any(|t| {
                matches!(
                    &t.status,
                    TokenStatus::Task(TaskState {
                        phase: TaskPhase::Running { .. },
                        ..
                    })
                )
            });
            self.snap.state = if running {
                InstanceState::Running
            } else {
                InstanceState::Waiting
            };
        }
        Step {
            snapshot: self.snap,
            effects: self.effects,
        }
    }

    // ---------------------------------------------------------------- helpers

    /// One journal entry (called through `journal!`, which skips building
    /// `data` when the journal is not wanted).
    pub(super) fn journal(&mut self, kind: &str, node: Option<&str>, data: Value) {
        let seq = self.snap.next_journal;
        self.snap.next_journal += 1;
        self.effects.push(Effect::Journal(JournalEntry {
            seq,
            at: self.inputs.now,
            kind: kind.to_string(),
            node: node.map(str::to_string),
            data,
        }));
    }

    /// A journal entry not kept: its sequence number is used all the same.
    pub(super) fn skip_journal(&mut self) {
        self.snap.next_journal += 1;
    }

    pub(super) fn node_of(&self, token: u64) -> Option<&'a Node> {
        let t = self.snap.token(token)?;
        self.process.find(&t.node)
    }

    pub(super) fn spawn(&mut self, node: NodeIx, scope: Option<u64>, via: Option<FlowIx>) -> u64 {
        let node_id = self.process.node(node).id.clone();
        self.set_state(&node_id, NodeState::Ready);
        let id = self.snap.next_token;
        self.snap.next_token += 1;
        self.snap.tokens.push(Token {
            id,
            node: self.process.node(node).id.clone(),
            scope,
            via: via.map(|f| self.process.flow(f).id.clone()),
            status: TokenStatus::Ready,
            boundary_parks: Vec::new(),
            doc: None,
            vars: None,
        });
        self.queue.push_back(id);
        id
    }

    /// Spawn a token that carries `doc`.
    pub(super) fn spawn_doc(
        &mut self,
        node: NodeIx,
        scope: Option<u64>,
        via: Option<FlowIx>,
        doc: Option<Value>,
    ) -> u64 {
        let id = self.spawn(node, scope, via);
        if let Some(t) = self.snap.token_mut(id) {
            t.doc = doc;
        }
        id
    }

    pub(super) fn arm(&mut self, park: Park) -> u64 {
        let seq = self.snap.next_park;
        self.snap.next_park += 1;
        self.snap.parks.insert(seq, park.clone());
        self.effects.push(Effect::Arm { seq, park });
        seq
    }

    pub(super) fn withdraw(&mut self, seq: u64) {
        if self.snap.parks.remove(&seq).is_some() {
            self.effects.push(Effect::Withdraw { seq });
        }
    }

    /// Remove a token and everything it owns (its parks, its children), without
    /// completing any scope.
    pub(super) fn discard(&mut self, token: u64) {
        let children: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope == Some(token))
            .map(|t| t.id)
            .collect();
        for c in children {
            // A token inside a scope that goes (a sub-process cut off by an
            // interrupting boundary, a cancel, a failed fan-out) is cut off
            // with it: its node, if still active, ends CANCELLED (issue 28:
            // an inner event stayed RUNNING).
            if let Some(n) = self.node_of(c).map(|n| n.id.clone()) {
                if self.state_of(&n).is_some_and(NodeState::is_active) {
                    self.set_state(&n, NodeState::Cancelled);
                }
            }
            self.discard(c);
        }
        self.snap.assigned.remove(&token);
        if let Some(pos) = self.snap.tokens.iter().position(|t| t.id == token) {
            let t = self.snap.tokens.remove(pos);
            if let TokenStatus::Task(TaskState {
                attempt,
                phase: TaskPhase::Running { .. },
                ..
            }) = &t.status
            {
                let interruptible = match self.process.find(&t.node).map(|n| &n.kind) {
                    Some(NodeKind::ServiceTask(task)) => task.idempotent,
                    _ => true,
                };
                self.effects.push(Effect::AttemptAbandoned {
                    token: t.id,
                    node: t.node.clone(),
                    attempt: *attempt,
                    interruptible,
                });
            }
            if let TokenStatus::Task(TaskState {
                phase: TaskPhase::Child { instance, .. },
                ..
            }) = &t.status
            {
                self.effects.push(Effect::CancelChild {
                    instance: instance.clone(),
                    reason: format!(
                        "its parent {} no longer awaits it at `{}`",
                        self.snap.instance_id, t.node
                    ),
                });
            }
            for p in t.parks() {
                self.withdraw(p);
            }
        }
    }

    /// Node entries left in this step before `SUTRA.RUNTIME.STEP_LIMIT`.
    pub(super) fn budget_left(&self) -> u32 {
        self.budget
    }

    pub(super) fn clear_queue(&mut self) {
        self.queue.clear();
    }

    /// Record a node's state (start and boundary events have none).
    pub(super) fn set_state(&mut self, node_id: &str, state: NodeState) {
        let Some(node) = self.process.find(node_id) else {
            return;
        };
        if matches!(node.kind, NodeKind::Start(_) | NodeKind::Boundary(_)) {
            return;
        }
        self.snap.node_states.insert(node_id.to_string(), state);
    }

    pub(super) fn state_of(&self, node_id: &str) -> Option<NodeState> {
        self.snap.node_states.get(node_id).copied()
    }

    /// Mark the node of every live token that is READY or RUNNING as CANCELLED.
    pub(super) fn cancel_active(&mut self) {
        let nodes: Vec<String> = self.snap.tokens.iter().map(|t| t.node.clone()).collect();
        for n in nodes {
            if self.state_of(&n).is_some_and(NodeState::is_active) {
                self.set_state(&n, NodeState::Cancelled);
            }
        }
    }

    /// A token finished at its node (an end event, or an outgoing-less node):
    /// remove it and complete its scope if it was the last one there.
    pub(super) fn consume(&mut self, token: u64) {
        let scope = self.snap.token(token).and_then(|t| t.scope);
        self.doc_consumed(token);
        self.discard(token);
        self.complete_scope_if_empty(scope);
    }

    pub(super) fn complete_scope_if_empty(&mut self, scope: Option<u64>) {
        // Event sub-process listeners do not keep a scope alive (event_sub.rs).
        if self.snap.state.is_terminal()
            || self
                .snap
                .tokens
                .iter()
                .any(|t| t.scope == scope && !self.is_listener(t))
        {
            return;
        }
        if self.snap.unwind.as_ref().is_some_and(|u| u.is_failure()) {
            // The unwind ends the instance itself (unwind.rs).
            return;
        }
        self.withdraw_listeners(scope);
        if let Some(j) = self.snap.joins.iter().find(|j| j.scope == scope).cloned() {
            // Nothing is left to decide the join's other flows.
            self.snap.joins.retain(|x| x != &j);
            self.fail_code(
                Code::JoinDeadEdge,
                format!(
                    "node `{}` waits for incoming edges that nothing is left to decide (decided: {:?} satisfied, {:?} dead)",
                    j.node, j.satisfied, j.dead
                ),
                Some(&j.node),
            );
            return;
        }
        match scope {
            None => self.end(InstanceState::Completed),
            Some(sub) => {
                if self.branch_completed(sub) {
                    return;
                }
                let Some(node) = self.node_of(sub) else {
                    return;
                };
                journal!(self, "subprocess_completed", Some(&node.id), json!({}));
                self.snap.completed.push(node.id.clone());
                self.leave(sub);
            }
        }
    }

    /// The terminal stamp: every token and park goes, the state is final.
    pub(super) fn end(&mut self, state: InstanceState) {
        if self.snap.state.is_terminal() {
            return;
        }
        self.cancel_active();
        self.snap.joins.clear();
        let tokens: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope.is_none())
            .map(|t| t.id)
            .collect();
        for t in tokens {
            self.discard(t);
        }
        let left: Vec<u64> = self.snap.parks.keys().copied().collect();
        for p in left {
            self.withdraw(p);
        }
        self.snap.tokens.clear();
        self.queue.clear();
        // Every node of a terminal instance is in a terminal state (issue
        // 28). The cases above and where tokens leave set the right one; a
        // node still READY or RUNNING here has lost its token without a
        // state of its own, i.e. it was cut off: CANCELLED.
        for s in self.snap.node_states.values_mut() {
            if s.is_active() {
                *s = NodeState::Cancelled;
            }
        }
        self.snap.state = state;
        self.snap.ended_at = Some(self.inputs.now);
        let kind = match state {
            InstanceState::Completed => "instance_completed",
            InstanceState::Terminated => "instance_terminated",
            InstanceState::Compensated => "instance_compensated",
            _ => "instance_failed",
        };
        journal!(self, kind, None, json!({ "error": self.snap.error }));
        self.effects.push(Effect::Ended { state });
    }

    /// Fail the instance with an engine code (or an uncaught business code).
    pub(super) fn fail(
        &mut self,
        code: &str,
        message: String,
        node: Option<&str>,
        cause: Option<Cause>,
    ) {
        if let Some(n) = node {
            if self.state_of(n).is_some_and(NodeState::is_active) {
                self.set_state(n, NodeState::Failed);
            }
        }
        if self.snap.unwind.as_ref().is_some_and(|u| u.is_failure()) {
            // A failure while unwinding fails the compensation in progress.
            self.unwind_failure(code, message, cause);
            return;
        }
        // A compensate throw's compensation in progress ends with the instance.
        self.snap.unwind = None;
        self.snap.error = Some(InstanceError {
            code: code.to_string(),
            message,
            node: node.map(str::to_string),
            cause,
            compensation_failures: Vec::new(),
        });
        if !self.begin_unwind() {
            self.end(InstanceState::Failed);
        }
    }

    pub(super) fn fail_code(&mut self, code: Code, message: String, node: Option<&str>) {
        self.fail(code.as_str(), message, node, None);
    }

    // ------------------------------------------------------------------- walk

    fn run(&mut self) {
        loop {
            self.run_queue();
            if self.signal_late_waits() {
                continue;
            }
            if self.fire_or_join() || self.fire_conditions() {
                continue;
            }
            if !self.fail_if_stuck() {
                return;
            }
        }
    }

    fn run_queue(&mut self) {
        while let Some(id) = self.queue.pop_front() {
            if self.snap.state.is_terminal() {
                self.queue.clear();
                return;
            }
            if self.budget == 0 {
                let node = self.snap.token(id).map(|t| t.node.clone());
                self.fail_code(
                    Code::StepLimit,
                    format!("more than {STEP_BUDGET} nodes entered in one step: a loop without a wait state?"),
                    node.as_deref(),
                );
                return;
            }
            self.budget -= 1;
            self.enter(id);
        }
    }

    fn enter(&mut self, token: u64) {
        let Some(node) = self.node_of(token) else {
            return;
        };
        if !matches!(
            self.snap.token(token).map(|t| &t.status),
            Some(TokenStatus::Ready)
        ) {
            return;
        }
        if node.data.is_some() && self.doc_enter(token, node) {
            return;
        }
        match &node.kind {
            NodeKind::Start(_) | NodeKind::Boundary(_) => self.leave(token),
            NodeKind::Pass { set } => {
                if let Some(Value::Object(m)) = set {
                    self.vars_home(token).extend(m.clone());
                }
                self.snap.completed.push(node.id.clone());
                self.leave(token);
            }
            NodeKind::End(kind) => {
                self.snap.completed.push(node.id.clone());
                let state = if matches!(kind, EndKind::Error { .. }) {
                    NodeState::Failed
                } else {
                    NodeState::Succeeded
                };
                self.set_state(&node.id, state);
                match kind {
                    EndKind::None => self.consume(token),
                    EndKind::Throw(throws) => {
                        self.throw_all(token, node, throws);
                        self.consume(token);
                    }
                    EndKind::Terminate => {
                        let scope = self.snap.token(token).and_then(|t| t.scope);
                        journal!(self, "terminate_end", Some(&node.id), json!({}));
                        match scope {
                            None => self.end(InstanceState::Completed),
                            Some(sub) => {
                                let siblings: Vec<u64> = self
                                    .snap
                                    .tokens
                                    .iter()
                                    .filter(|t| t.scope == Some(sub))
                                    .map(|t| t.id)
                                    .collect();
                                for s in siblings {
                                    self.discard(s);
                                }
                                self.complete_scope_if_empty(Some(sub));
                            }
                        }
                    }
                    EndKind::Escalation { code } => self.escalate(token, node, code),
                    EndKind::Compensate(throw) => self.compensate_throw(token, node, throw),
                    EndKind::Error { code, message } => {
                        let scope = self.snap.token(token).and_then(|t| t.scope);
                        self.discard(token);
                        let raised = Raised {
                            code: code.clone(),
                            message: message
                                .clone()
                                .unwrap_or_else(|| format!("error end event `{}`", node.id)),
                            details: None,
                            failure: None,
                            also: Vec::new(),
                        };
                        self.raise(scope, raised, &node.id);
                    }
                }
            }
            // A registered task runs an attempt; a channel call issues a request (channel.rs).
            NodeKind::ServiceTask(_) => {
                self.arm_boundaries(token, node);
                self.start_attempt(token, 1, Vec::new());
            }
            NodeKind::ExclusiveGateway { default } => self.exclusive(token, node, *default),
            NodeKind::ParallelGateway => self.parallel(token, node),
            NodeKind::InclusiveGateway => self.inclusive(token, node),
            NodeKind::EventGateway => self.event_gateway_enter(token, node),
            NodeKind::Throw(throws) => {
                self.throw_all(token, node, throws);
                self.snap.completed.push(node.id.clone());
                self.leave(token);
            }
            NodeKind::Catch(trigger) => {
                // A receive task's boundaries (a catch event has none).
                self.arm_boundaries(token, node);
                let park = self.catch_park(token, node, trigger);
                if let (Some(park), Some(t)) = (park, self.snap.token_mut(token)) {
                    t.status = TokenStatus::Waiting { park };
                }
                if !self.snap.state.is_terminal() {
                    self.set_state(&node.id, NodeState::Running);
                }
            }
            NodeKind::Fanout(_) => self.fanout_enter(token, 1, Vec::new()),
            NodeKind::Escalate { code } => self.escalate(token, node, code),
            NodeKind::Compensate(throw) => self.compensate_throw(token, node, throw),
            // Never entered along a flow: started by its trigger (event_sub.rs).
            NodeKind::EventSubProcess { .. } => self.consume(token),
            // A process call starts a child and waits for it (child.rs).
            NodeKind::CallProcess { .. } => {
                self.arm_boundaries(token, node);
                self.start_child(token, 1, Vec::new());
            }
            NodeKind::SubProcess => {
                self.set_state(&node.id, NodeState::Running);
                if let Some(t) = self.snap.token_mut(token) {
                    t.status = TokenStatus::InSubProcess;
                }
                self.arm_boundaries(token, node);
                self.arm_event_subs(Some(token), Some(node.ix));
                let starts: Vec<NodeIx> = self
                    .process
                    .starts_in(Some(node.ix))
                    .filter(|n| matches!(n.kind, NodeKind::Start(StartTrigger::None)))
                    .map(|n| n.ix)
                    .collect();
                for s in &starts {
                    self.spawn(*s, Some(token), None);
                }
                if starts.is_empty() {
                    self.complete_scope_if_empty(Some(token));
                }
            }
        }
    }

    fn exclusive(&mut self, token: u64, node: &'a Node, default: Option<FlowIx>) {
        let mut chosen = None;
        for &f in &node.outgoing {
            if Some(f) == default {
                continue;
            }
            let flow = self.process.flow(f);
            let holds = match &flow.condition {
                None => Ok(true),
                Some(c) => c.eval_bool(&self.vars_of(token)),
            };
            match holds {
                Ok(true) => {
                    chosen = Some(f);
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    self.fail_code(
                        e.code(),
                        format!("condition on `{}` failed: {e}", flow.id),
                        Some(&node.id),
                    );
                    return;
                }
            }
        }
        let Some(f) = chosen.or(default) else {
            self.fail_code(
                Code::NoFlowTaken,
                format!(
                    "exclusive gateway `{}`: no condition holds and there is no default flow",
                    node.id
                ),
                Some(&node.id),
            );
            return;
        };
        let scope = self.snap.token(token).and_then(|t| t.scope);
        self.set_state(&node.id, NodeState::Succeeded);
        self.discard(token);
        self.spawn(self.process.flow(f).target, scope, Some(f));
    }

    fn parallel(&mut self, token: u64, node: &'a Node) {
        if node.incoming.len() <= 1 {
            self.leave(token);
            return;
        }
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Joining;
        }
        let scope = self.snap.token(token).and_then(|t| t.scope);
        // One waiting token per incoming flow completes the join.
        let mut take = Vec::new();
        for &f in &node.incoming {
            let flow_id = &self.process.flow(f).id;
            let found = self.snap.tokens.iter().find(|t| {
                t.node == node.id
                    && t.scope == scope
                    && matches!(t.status, TokenStatus::Joining)
                    && t.via.as_deref() == Some(flow_id.as_str())
            });
            match found {
                Some(t) => take.push(t.id),
                None => return,
            }
        }
        for t in take {
            self.discard(t);
        }
        journal!(self, "joined", Some(&node.id), json!({}));
        let merged = self.spawn(node.ix, scope, None);
        // The merged token leaves at once (it must not join again).
        self.queue.retain(|&q| q != merged);
        self.leave(merged);
    }

    // ----------------------------------------------------------- attempts

    pub(super) fn start_attempt(&mut self, token: u64, attempt: u32, granted: Vec<u32>) {
        let Some(node) = self.node_of(token) else {
            return;
        };
        if matches!(node.kind, NodeKind::CallProcess { .. }) {
            // A retried process call starts a fresh child (child.rs).
            self.start_child(token, attempt, granted);
            return;
        }
        let NodeKind::ServiceTask(task) = &node.kind else {
            return;
        };
        let by_path = match &task.io.input_path {
            Some(p) if node.data.is_none() => Some(self.vars_get(token, p)),
            _ => None,
        };
        let input = match (&task.io.input_path, by_path) {
            _ if node.data.is_some() => match self.doc_task_input(token, node, attempt) {
                Some(v) => v,
                None => return,
            },
            (None, _) | (_, None) => Value::Object(self.compensator_input(token)),
            (Some(_), Some(got)) => match got {
                Ok(v) => v,
                Err(e) => {
                    self.fail_code(
                        Code::VariablePath,
                        format!("input of `{}`: {e}", node.id),
                        Some(&node.id),
                    );
                    return;
                }
            },
        };
        let name = match &task.implementation {
            TaskImpl::Registered(name) => name.as_str(),
            // The host makes the call (runtime::http_task): an attempt like any other.
            TaskImpl::Http(_) => crate::model::HTTP_TASK,
            TaskImpl::Channel(channel) => {
                self.start_call(token, node, task, channel, attempt, granted, input);
                return;
            }
        };
        let lease =
            chrono::Duration::from_std(self.inputs.attempt_lease).unwrap_or(chrono::Duration::MAX);
        let due = self
            .inputs
            .now
            .checked_add_signed(lease)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let park = self.arm(Park {
            kind: ParkKind::Attempt,
            token,
            node: node.id.clone(),
            due: Some(due),
            message: None,
            cycle: None,
        });
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Task(TaskState {
                attempt,
                phase: TaskPhase::Running { park },
                granted,
                since: self.inputs.now,
            });
        }
        self.set_state(&node.id, NodeState::Running);
        let idempotency_key = format!("{}:{}:{}", self.snap.instance_id, node.id, token);
        journal!(
            self,
            "attempt_started",
            Some(&node.id),
            json!({ "attempt": attempt, "token": token }),
        );
        self.effects.push(Effect::RunAttempt(AttemptRequest {
            token,
            node: node.id.clone(),
            task: name.to_string(),
            attempt,
            input,
            idempotency_key,
            timeout: task.timeout.as_ref().map(|t| t.duration.as_std()),
        }));
    }

    pub(super) fn rerun_attempt(&mut self, token: u64) {
        let Some(TokenStatus::Task(state)) = self.snap.token(token).map(|t| t.status.clone())
        else {
            return;
        };
        self.start_attempt(token, state.attempt, state.granted);
    }

    pub(super) fn retry_due(&mut self, token: u64) {
        let Some(TokenStatus::Task(state)) = self.snap.token(token).map(|t| t.status.clone())
        else {
            return;
        };
        if !matches!(state.phase, TaskPhase::Backoff { .. }) {
            return;
        }
        self.start_attempt(token, state.attempt, state.granted);
    }

    // -------------------------------------------------------------- errors

    /// Route a raised error to the nearest matching error boundary, starting at
    /// the activity token `at` (a task) or, for `None`, at the process level,
    /// walking up through enclosing sub-processes. Uncaught: the instance fails.
    pub(super) fn raise_from(&mut self, at: Option<u64>, raised: Raised, origin: &str) {
        self.set_state(origin, NodeState::Failed);
        if let Some(tok) = at {
            if self.is_compensating(tok) {
                self.compensator_failed(raised);
                return;
            }
            if self.take_error_flows(tok, &raised, origin) {
                return;
            }
        }
        let mut current = at;
        // An error out of an event sub-process skips its scope's event sub-processes.
        let mut from_event_sub = false;
        while let Some(tok) = current {
            if !from_event_sub
                && raised.failure.is_none()
                && self.event_sub_catches_error(Some(tok), &raised.code, origin)
            {
                return;
            }
            if self.branch_absorbs(tok, &raised) || self.fanout_retry(tok, &raised) {
                return;
            }
            let Some(node) = self.node_of(tok) else { break };
            from_event_sub = matches!(node.kind, NodeKind::EventSubProcess { .. });
            for &b in &node.boundaries {
                let bnode = self.process.node(b);
                let NodeKind::Boundary(ev) = &bnode.kind else {
                    continue;
                };
                let BoundaryTrigger::Error {
                    codes,
                    result_path,
                    catch_failures,
                } = &ev.trigger
                else {
                    continue;
                };
                if raised.failure.is_some() && !catch_failures {
                    continue;
                }
                let matches = match codes {
                    None => true,
                    Some(list) => list.iter().any(|c| {
                        c == &raised.code
                            || raised.failure.as_ref().is_some_and(|f| &f.code == c)
                            || raised.also.contains(c)
                    }),
                };
                if !matches {
                    continue;
                }
                let scope = self.snap.token(tok).and_then(|t| t.scope);
                let doc = match self.caught_doc(tok, bnode, &raised) {
                    Ok(doc) => doc,
                    Err(e) => {
                        self.fail_code(e.code, e.message, Some(&bnode.id));
                        return;
                    }
                };
                let item = self.item_of(tok);
                self.interrupt(tok, NodeState::Failed);
                // The error the catcher matched (what `{Error, Cause}` says),
                // and the engine code that carried it, if another.
                let (name, cause) = match &raised.failure {
                    Some(f) => (&f.code, &f.message),
                    None => (&raised.code, &raised.message),
                };
                journal!(
                    self,
                    "error_caught",
                    Some(&bnode.id),
                    super::outcome::tag_item(
                        json!({ "code": name, "message": cause, "raised": raised.code, "from": origin }),
                        item
                    ),
                );
                if let Some(path) = result_path {
                    let cause = raised
                        .failure
                        .as_ref()
                        .map(|f| f.message.clone())
                        .unwrap_or(raised.message.clone());
                    let err = json!({ "Error": raised.failure.as_ref().map(|f| f.code.clone()).unwrap_or(raised.code.clone()), "Cause": cause });
                    if let Err(e) = vars::set(self.vars_home_in(scope), path, err) {
                        self.fail_code(
                            Code::VariablePath,
                            format!("result path of `{}`: {e}", bnode.id),
                            Some(&bnode.id),
                        );
                        return;
                    }
                }
                self.spawn_doc(b, scope, None, doc);
                return;
            }
            current = self.snap.token(tok).and_then(|t| t.scope);
        }
        if !from_event_sub
            && raised.failure.is_none()
            && self.event_sub_catches_error(None, &raised.code, origin)
        {
            return;
        }
        let cause = raised.failure.clone();
        let message = match &raised.details {
            Some(d) => format!("{} ({d})", raised.message),
            None => raised.message.clone(),
        };
        self.fail(&raised.code, message, Some(origin), cause);
    }

    fn raise(&mut self, scope: Option<u64>, raised: Raised, origin: &str) {
        self.raise_from(scope, raised, origin);
    }
}
