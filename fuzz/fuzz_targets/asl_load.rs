//! Fuzz `sutra::dialect::asl::load` (the States-language loader): it must
//! never panic, must stay bounded on any input, and the IR it returns must
//! keep the model invariants (checked here: a violation is a crash).
//!
//! Run from the repository root (stable toolchain):
//! ```text
//! cp Cargo.lock fuzz/ && mkdir -p fuzz/corpus/asl_load
//! RUSTC_BOOTSTRAP=1 cargo fuzz run asl_load fuzz/corpus/asl_load fuzz/seeds-asl --sanitizer none \
//!     -- -dict=fuzz/asl.dict -max_len=65536 -timeout=10 -max_total_time=600
//! ```
//! `fuzz/seeds-asl` holds States-language definitions (valid and invalid).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra::model::{NodeKind, Process};

fn check(p: &Process) {
    let n = p.nodes.len() as u32;
    for (i, node) in p.nodes.iter().enumerate() {
        assert_eq!(node.ix.0 as usize, i);
        if let Some(s) = node.scope {
            assert!(s.0 < n);
            assert!(matches!(
                p.node(s).kind,
                NodeKind::SubProcess | NodeKind::Fanout(_)
            ));
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
        if let NodeKind::Fanout(f) = &node.kind {
            for &b in &f.branches {
                assert!(b.0 < n && p.node(b).scope == Some(node.ix));
            }
        }
        if let NodeKind::ExclusiveGateway { default: Some(f) } = node.kind {
            assert_eq!(p.flow(f).source, node.ix);
        }
        assert_eq!(p.find(&node.id).map(|x| x.ix), Some(node.ix));
    }
    for (i, f) in p.flows.iter().enumerate() {
        assert_eq!(f.ix.0 as usize, i);
        assert!(f.source.0 < n && f.target.0 < n);
        assert_eq!(p.node(f.source).scope, p.node(f.target).scope);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let loaded = sutra::dialect::asl::load(text);
    for p in &loaded.definitions.processes {
        check(p);
        let _ = p.stateful();
        let _ = serde_json::to_string(p);
    }
    for d in &loaded.diagnostics {
        assert!(d.line > 0 || d.code == sutra::Code::StatesLimitExceeded || d.code == sutra::Code::StatesJsonMalformed);
        let _ = d.to_string();
    }
});
