//! Loader unit tests: shapes, codes and positions.
use super::load;
use crate::codes::Code;

fn codes(src: &str) -> Vec<Code> {
    load(src).diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn a_minimal_machine_loads() {
    let l = load(r#"{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}}"#);
    assert!(l.ok(), "{:?}", l.diagnostics);
    assert_eq!(l.definitions.processes.len(), 1);
}

#[test]
fn json_without_start_at_and_states_is_not_a_machine() {
    assert_eq!(codes("{\"a\": 1}"), vec![Code::StatesNotAStateMachine]);
}
