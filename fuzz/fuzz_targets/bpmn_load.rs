//! Fuzz `sutra::dialect::bpmn::load_bytes`: it must never panic, must stay
//! bounded on any input, and whatever it reports, the IR it returns must keep
//! the model invariants (checked here: a violation is a crash).
//!
//! Run from the repository root (stable toolchain; the main lock file keeps
//! dependency versions equal to the main build):
//! ```text
//! cp Cargo.lock fuzz/ && mkdir -p fuzz/corpus/bpmn_load
//! RUSTC_BOOTSTRAP=1 cargo fuzz run bpmn_load fuzz/corpus/bpmn_load fuzz/seeds --sanitizer none \
//!     -- -dict=fuzz/bpmn.dict -max_len=65536 -timeout=10 -max_total_time=600
//! ```
//! `fuzz/seeds` holds the valid fixtures and a few invalid ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra::model::{NodeKind, Process};

fn check(p: &Process) {
    let n = p.nodes.len() as u32;
    for (i, node) in p.nodes.iter().enumerate() {
        assert_eq!(node.ix.0 as usize, i);
        if let Some(s) = node.scope {
            assert!(s.0 < n && matches!(p.node(s).kind, NodeKind::SubProcess));
        }
        for &f in &node.incoming {
            assert_eq!(p.flow(f).target, node.ix);
        }
        for &f in &node.outgoing {
            assert_eq!(p.flow(f).source, node.ix);
        }
        for &b in &node.boundaries {
            assert!(matches!(&p.node(b).kind, NodeKind::Boundary(be) if be.attached_to == node.ix));
        }
        if let NodeKind::Boundary(be) = &node.kind {
            let host = p.node(be.attached_to);
            assert!(matches!(
                host.kind,
                NodeKind::ServiceTask(_) | NodeKind::SubProcess
            ));
            assert_eq!(host.scope, node.scope);
        }
        if let NodeKind::ExclusiveGateway { default: Some(f) } = node.kind {
            assert_eq!(p.flow(f).source, node.ix);
        }
    }
    for (i, f) in p.flows.iter().enumerate() {
        assert_eq!(f.ix.0 as usize, i);
        assert!(f.source.0 < n && f.target.0 < n);
        assert_eq!(p.node(f.source).scope, p.node(f.target).scope);
    }
}

fuzz_target!(|data: &[u8]| {
    let loaded = sutra::dialect::bpmn::load_bytes(data);
    for p in &loaded.definitions.processes {
        check(p);
        let _ = p.stateful();
    }
    for d in &loaded.diagnostics {
        let _ = d.to_string();
    }
});
