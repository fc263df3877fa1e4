//! The inclusive gateway's join (BPMN's OR-join).
//!
//! A token that reaches an inclusive gateway with several incoming flows
//! waits there (`TokenStatus::Joining`). Whenever the step's queue has
//! drained, each waiting OR-join is judged: it fires when no other token of
//! its scope can still arrive on one of its incoming flows that has no
//! token yet. "Can still arrive" is reachability on the IR: the token sits
//! at a node from which the source of such an empty flow is reachable
//! backwards along sequence flows — an activity also reaches what its
//! boundary events lead to — without passing through the gateway itself
//! (a token that could only come round through the gateway belongs to a
//! later activation). Tokens of other scopes are represented by the
//! container token of this scope (a sub-process or fan-out token), so a
//! token inside a sub-process upstream keeps the join waiting. When it
//! fires, one token per incoming flow that has one is merged and leaves
//! along the gateway's outgoing flows (the split rule). Cost: one backward
//! search over the scope's nodes per waiting join and judgement.
//!
//! Two OR-joins that wait for each other (or for a parallel join that waits
//! for them) would wait forever; once nothing else runs or waits, the
//! instance fails with `SUTRA.RUNTIME.JOIN.DEAD_EDGE` (`fail_if_stuck`).

use super::machine::Machine;
use super::TokenStatus;
use crate::model::{FlowKind, Node, NodeIx, NodeKind};
use serde_json::json;
use std::collections::HashSet;

impl<'a> Machine<'a> {
    /// A token enters an inclusive gateway: a split passes on at once; a
    /// join waits for `fire_or_join`.
    pub(super) fn inclusive(&mut self, token: u64, node: &'a Node) {
        if node.incoming.len() <= 1 {
            self.leave(token);
            return;
        }
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Joining;
        }
    }

    /// Fire the first waiting OR-join that nothing can reach any more.
    /// Returns whether one fired (its merged token has left).
    pub(super) fn fire_or_join(&mut self) -> bool {
        if self.snap.state.is_terminal() {
            return false;
        }
        let mut waiting: Vec<(NodeIx, Option<u64>)> = Vec::new();
        for t in &self.snap.tokens {
            if !matches!(t.status, TokenStatus::Joining) {
                continue;
            }
            let Some(n) = self.process.find(&t.node) else {
                continue;
            };
            if matches!(n.kind, NodeKind::InclusiveGateway) && !waiting.contains(&(n.ix, t.scope)) {
                waiting.push((n.ix, t.scope));
            }
        }
        for (ix, scope) in waiting {
            let node = self.process.node(ix);
            let arrived = |m: &Self, flow: &str| {
                m.snap
                    .tokens
                    .iter()
                    .find(|t| {
                        t.node == node.id
                            && t.scope == scope
                            && matches!(t.status, TokenStatus::Joining)
                            && t.via.as_deref() == Some(flow)
                    })
                    .map(|t| t.id)
            };
            let mut take = Vec::new();
            let mut empty_sources = Vec::new();
            for &f in &node.incoming {
                let flow = self.process.flow(f);
                if flow.kind != FlowKind::Sequence {
                    continue;
                }
                match arrived(&*self, &flow.id) {
                    Some(t) => take.push(t),
                    None => empty_sources.push(flow.source),
                }
            }
            if take.is_empty() || self.may_still_arrive(ix, scope, &empty_sources) {
                continue;
            }
            for t in take {
                self.discard(t);
            }
            journal!(self, "joined", Some(&node.id), json!({ "inclusive": true }));
            let merged = self.spawn(ix, scope, None);
            // The merged token leaves at once (it must not join again).
            self.queue.retain(|&q| q != merged);
            self.leave(merged);
            return true;
        }
        false
    }

    /// Whether a token of `scope` (other than those waiting at `join`) sits
    /// at a node from which one of `sources` is reachable without passing
    /// through `join`.
    fn may_still_arrive(&self, join: NodeIx, scope: Option<u64>, sources: &[NodeIx]) -> bool {
        if sources.is_empty() {
            return false;
        }
        let mut upstream: HashSet<NodeIx> = HashSet::new();
        let mut work: Vec<NodeIx> = sources.iter().copied().filter(|&s| s != join).collect();
        while let Some(n) = work.pop() {
            if !upstream.insert(n) {
                continue;
            }
            let node = self.process.node(n);
            for &f in &node.incoming {
                let flow = self.process.flow(f);
                if flow.kind != FlowKind::Compensation && flow.source != join {
                    work.push(flow.source);
                }
            }
            // A token at an activity may leave through this boundary event.
            if let NodeKind::Boundary(b) = &node.kind {
                work.push(b.attached_to);
            }
        }
        let join_id = &self.process.node(join).id;
        self.snap.tokens.iter().any(|t| {
            t.scope == scope
                && !(t.node == *join_id && matches!(t.status, TokenStatus::Joining))
                && self
                    .process
                    .find(&t.node)
                    .is_some_and(|n| upstream.contains(&n.ix))
        })
    }
}
