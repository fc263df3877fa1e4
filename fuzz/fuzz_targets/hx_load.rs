//! Fuzz the HX loader through `sutra::dialect::load_bytes` (the sniffer routes
//! a `<workflow>` root to it; inputs that are not one go to the other loaders,
//! which must not panic either). It must never panic, must stay bounded on
//! any input, and whatever it reports, the IR it returns must keep the model
//! invariants (checked here: a violation is a crash).
//!
//! Run from the repository root (stable toolchain; the main lock file keeps
//! dependency versions equal to the main build):
//! ```text
//! cp Cargo.lock fuzz/ && mkdir -p fuzz/corpus/hx_load
//! RUSTC_BOOTSTRAP=1 cargo fuzz run hx_load fuzz/corpus/hx_load fuzz/seeds-hx --sanitizer none \
//!     -- -dict=fuzz/hx.dict -max_len=65536 -timeout=10 -max_total_time=600
//! ```
//! `fuzz/seeds-hx` holds the HX test fixtures, valid and invalid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra::model::{FlowKind, NodeKind, Process};

fn check(p: &Process) {
    let n = p.nodes.len() as u32;
    for (i, node) in p.nodes.iter().enumerate() {
        assert_eq!(node.ix.0 as usize, i);
        assert_eq!(p.find(&node.id).map(|x| x.ix), Some(node.ix), "ids are unique");
        for &f in &node.incoming {
            assert_eq!(p.flow(f).target, node.ix);
        }
        for &f in &node.outgoing {
            assert_eq!(p.flow(f).source, node.ix);
        }
        for &b in &node.boundaries {
            assert!(matches!(&p.node(b).kind, NodeKind::Boundary(be) if be.attached_to == node.ix));
        }
    }
    for (i, f) in p.flows.iter().enumerate() {
        assert_eq!(f.ix.0 as usize, i);
        assert!(f.source.0 < n && f.target.0 < n);
        if f.kind == FlowKind::Compensation {
            assert!(matches!(p.node(f.target).kind, NodeKind::ServiceTask(_)));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let loaded = sutra::dialect::load_bytes(data);
    for p in &loaded.definitions.processes {
        check(p);
        let _ = p.stateful();
        let _ = p.registered_tasks();
    }
    for d in &loaded.diagnostics {
        let _ = d.to_string();
    }
});
