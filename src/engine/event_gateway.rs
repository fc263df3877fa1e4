//! BPMN's event-based gateway: the token stays at the gateway and waits on
//! every catch its outgoing flows lead to (message, timer, signal, receive
//! task — a `Catch` node each, checked at load). The first wait to fire
//! wins: every other wait of the token is withdrawn in the same step (one
//! commit), and the token moves to the winning catch, which completes and
//! leaves as if the token had waited there. The waits are parks, so the
//! race survives a restart like any other wait.

use super::machine::Machine;
use super::snapshot::NodeState;
use super::{Park, TokenStatus};
use crate::model::{Node, NodeKind};
use serde_json::json;

impl<'a> Machine<'a> {
    pub(super) fn event_gateway_enter(&mut self, token: u64, gateway: &'a Node) {
        let mut first = None;
        for &f in &gateway.outgoing {
            let target = self.process.node(self.process.flow(f).target);
            let NodeKind::Catch(trigger) = &target.kind else {
                continue;
            };
            let Some(p) = self.catch_park(token, target, trigger) else {
                return;
            };
            if first.is_none() {
                first = Some(p);
            } else if let Some(t) = self.snap.token_mut(token) {
                t.boundary_parks.push(p);
            }
        }
        if let (Some(p), Some(t)) = (first, self.snap.token_mut(token)) {
            t.status = TokenStatus::Waiting { park: p };
        }
        if !self.snap.state.is_terminal() {
            self.set_state(&gateway.id, NodeState::Running);
        }
    }

    /// Park `seq` (already withdrawn) fired for catch `catch`: if its token
    /// waits at an event-based gateway, the gateway is decided here and
    /// `true` comes back.
    pub(super) fn event_gateway_fired(&mut self, seq: u64, park: &Park, catch: &'a Node) -> bool {
        // Looked at in place: every timer, message and signal that fires
        // comes through here, and few wait at a gateway.
        let Some(gateway) = self
            .snap
            .token(park.token)
            .and_then(|t| self.process.find(&t.node))
        else {
            return false;
        };
        if !matches!(gateway.kind, NodeKind::EventGateway) {
            return false;
        }
        let Some(tok) = self.snap.token(park.token).cloned() else {
            return false;
        };
        // The losers, in this same step.
        let losers: Vec<u64> = tok.parks().into_iter().filter(|&p| p != seq).collect();
        for p in &losers {
            self.withdraw(*p);
        }
        let via = gateway
            .outgoing
            .iter()
            .map(|&f| self.process.flow(f))
            .find(|f| f.target == catch.ix)
            .map(|f| f.id.clone());
        self.set_state(&gateway.id, NodeState::Succeeded);
        self.snap.completed.push(gateway.id.clone());
        journal!(
            self,
            "event_gateway_decided",
            Some(&gateway.id),
            json!({ "winner": catch.id, "withdrawn": losers.len() }),
        );
        if let Some(t) = self.snap.token_mut(park.token) {
            t.node = catch.id.clone();
            t.via = via;
            t.status = TokenStatus::Ready;
            t.boundary_parks.clear();
        }
        self.snap.completed.push(catch.id.clone());
        self.leave(park.token);
        true
    }
}
