//! Signals and thrown messages: a signal wait is a park (`ParkKind::Signal`,
//! its name in the park's `message` key, no due time) that a broadcast
//! fires (`Event::SignalArrived`); a throw event, a send task or a message
//! or signal end event emits `Effect::Throw`, which the runtime writes in
//! the step's commit (the store's `signals` outbox) and delivers after it
//! (runtime/signals.rs). Nothing here knows who receives a throw.
//!
//! Also the catch side shared by catch events, receive tasks and
//! event-based gateways: the park a `CatchTrigger` arms (`catch_park`), a
//! "Multiple" catch arming one park per definition.

use super::machine::Machine;
use super::{Effect, MessageKey, Park, ParkKind};
use crate::codes::Code;
use crate::model::{CatchTrigger, Node, Throw};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// What a throw sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThrownKind {
    Message,
    Signal,
}

impl ThrownKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ThrownKind::Message => "message",
            ThrownKind::Signal => "signal",
        }
    }
}

/// One message or signal thrown by a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thrown {
    pub kind: ThrownKind,
    pub name: String,
    /// A message's correlation key (evaluated when thrown); `None` for a signal.
    pub key: Option<String>,
    pub variables: Map<String, Value>,
    /// The node that threw it (for the journal and the row).
    pub node: String,
}

/// A signal thrown in this step, for the instance's own late waits: the
/// next token and park numbers at the throw, and the tokens it reached then.
pub(super) struct OwnThrow {
    name: String,
    tokens: u64,
    parks: u64,
    reached: Vec<u64>,
    variables: Map<String, Value>,
}

impl<'a> Machine<'a> {
    pub(super) fn signal_park(&mut self, token: u64, node: &Node, name: &str) -> Option<u64> {
        journal!(
            self,
            "signal_awaited",
            Some(&node.id),
            json!({ "name": name })
        );
        Some(self.arm(Park {
            kind: ParkKind::Signal,
            token,
            node: node.id.clone(),
            due: None,
            message: Some(MessageKey {
                name: name.to_string(),
                key: None,
                event: false,
            }),
            cycle: None,
        }))
    }

    /// Arm what `trigger` waits for at `node` for `token`; the first park
    /// (the token's `Waiting` park). A "Multiple" catch arms one park per
    /// definition: the others ride on the token's `boundary_parks`, so that
    /// the token owns them all and leaving withdraws them.
    pub(super) fn catch_park(
        &mut self,
        token: u64,
        node: &Node,
        trigger: &CatchTrigger,
    ) -> Option<u64> {
        match trigger {
            CatchTrigger::Timer(spec) => self.timer_park(token, node, spec),
            CatchTrigger::Message(m) => self.message_park(token, node, m),
            CatchTrigger::TimerFrom(from) => self.timer_from_park(token, node, from),
            CatchTrigger::Signal { name } => self.signal_park(token, node, name),
            CatchTrigger::Condition(c) => self.condition_park(token, node, c),
            CatchTrigger::Any(list) => {
                let mut first = None;
                for t in list {
                    let p = self.catch_park(token, node, t)?;
                    if first.is_none() {
                        first = Some(p);
                    } else if let Some(tok) = self.snap.token_mut(token) {
                        tok.boundary_parks.push(p);
                    }
                }
                first
            }
        }
    }

    /// A broadcast reached park `seq`: only a signal park takes it (a
    /// delivery replayed after a crash finds its park gone: ignored).
    pub(super) fn signal_arrived(&mut self, seq: u64, variables: Map<String, Value>) {
        match self.snap.parks.get(&seq) {
            Some(p) if p.kind == ParkKind::Signal => self.park_fired(seq, variables),
            _ => journal!(
                self,
                "park_ignored",
                None,
                json!({ "park": seq, "reason": "no signal wait (already fired or withdrawn)" }),
            ),
        }
    }

    /// Throw every definition of a throw event (BPMN "Multiple" throws all).
    pub(super) fn throw_all(&mut self, token: u64, node: &Node, throws: &[Throw]) {
        for t in throws {
            let payload = match t {
                Throw::Signal { payload, .. } | Throw::Message { payload, .. } => payload,
            };
            let variables = match payload.as_deref().map(|p| self.vars_get(token, p)) {
                None => Map::new(),
                Some(Ok(Value::Object(m))) => m,
                Some(Ok(Value::Null)) => Map::new(),
                Some(Ok(other)) => {
                    self.fail_code(
                        Code::VariablePath,
                        format!(
                            "what `{}` throws (q:io inputPath) must be an object, not {other}",
                            node.id
                        ),
                        Some(&node.id),
                    );
                    return;
                }
                Some(Err(e)) => {
                    self.fail_code(
                        Code::VariablePath,
                        format!("what `{}` throws: {e}", node.id),
                        Some(&node.id),
                    );
                    return;
                }
            };
            let (kind, name, key) = match t {
                Throw::Signal { name, .. } => (ThrownKind::Signal, name, None),
                Throw::Message {
                    name,
                    correlation_key,
                    ..
                } => {
                    let key = match correlation_key
                        .as_ref()
                        .map(|e| e.eval(&self.vars_of(token)))
                    {
                        None | Some(Ok(Value::Null)) => None,
                        Some(Ok(Value::String(s))) => Some(s),
                        Some(Ok(other)) => Some(other.to_string()),
                        Some(Err(e)) => {
                            self.fail_code(
                                e.code(),
                                format!("correlation key of `{}` failed: {e}", node.id),
                                Some(&node.id),
                            );
                            return;
                        }
                    };
                    (ThrownKind::Message, name, key)
                }
            };
            journal!(
                self,
                &format!("{}_thrown", kind.as_str()),
                Some(&node.id),
                json!({ "name": name, "key": key }),
            );
            self.effects.push(Effect::Throw(Thrown {
                kind,
                name: name.clone(),
                key,
                variables: variables.clone(),
                node: node.id.clone(),
            }));
            if kind == ThrownKind::Signal {
                let tokens = self.snap.next_token;
                let parks = self.snap.next_park;
                let reached = self.signal_own_waits(name, &variables);
                self.thrown.push(OwnThrow {
                    name: name.clone(),
                    tokens,
                    parks,
                    reached,
                    variables,
                });
            }
        }
    }

    /// Once the step's tokens have all moved: a signal thrown in it also
    /// reaches the waits armed after the throw by tokens that already
    /// existed when it was thrown (a parallel branch that reached its catch
    /// later in the same step), never those of the thrower's continuation.
    pub(super) fn signal_late_waits(&mut self) -> bool {
        let thrown = std::mem::take(&mut self.thrown);
        let mut fired = false;
        for t in thrown {
            let late: Vec<u64> = self
                .snap
                .parks
                .iter()
                .filter(|(seq, p)| {
                    **seq >= t.parks
                        && p.token < t.tokens
                        && !t.reached.contains(&p.token)
                        && p.kind == ParkKind::Signal
                        && p.message.as_ref().is_some_and(|m| m.name == t.name)
                })
                .map(|(seq, _)| *seq)
                .collect();
            for seq in late {
                if self.snap.state.is_terminal() {
                    return fired;
                }
                if self.snap.parks.contains_key(&seq) {
                    self.park_fired(seq, t.variables.clone());
                    fired = true;
                }
            }
        }
        fired
    }

    /// A signal reaches the throwing instance's own waits at once, in the
    /// throwing step (as in Camunda: a signal end event of a sub-process is
    /// caught by the sub-process's boundary before the sub-process ends);
    /// the runtime's fan-out leaves this instance out. Only the waits armed
    /// before the throw: a non-interrupting boundary re-armed here is not
    /// reached again.
    fn signal_own_waits(&mut self, name: &str, variables: &Map<String, Value>) -> Vec<u64> {
        let waits: Vec<u64> = self
            .snap
            .parks
            .iter()
            .filter(|(_, p)| {
                p.kind == ParkKind::Signal && p.message.as_ref().is_some_and(|m| m.name == name)
            })
            .map(|(seq, _)| *seq)
            .collect();
        let mut reached = Vec::new();
        for seq in waits {
            if self.snap.state.is_terminal() {
                break;
            }
            // An earlier one may have withdrawn it (an interrupting boundary).
            if let Some(token) = self.snap.parks.get(&seq).map(|p| p.token) {
                reached.push(token);
                self.park_fired(seq, variables.clone());
            }
        }
        reached
    }
}
