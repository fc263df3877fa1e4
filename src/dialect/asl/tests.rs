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

fn first(src: &str) -> crate::diag::Diagnostic {
    load(src)
        .diagnostics
        .into_iter()
        .next()
        .expect("a diagnostic")
}

#[test]
fn diagnostics_carry_codes_and_positions() {
    let l = load("{\n  \"StartAt\": \"A\",\n  \"States\": {\n    \"A\": {\"Type\": \"Pass\", \"Next\": \"Nowhere\"}\n  }\n}");
    let d = l
        .diagnostics
        .iter()
        .find(|d| d.code == Code::StatesUnknownState)
        .expect("unknown state");
    assert_eq!((d.line, d.column), (4, 35));
    let d = first(
        r#"{"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "x", "End": true,
        "Retry": [{"ErrorEquals": ["States.ALL"]}, {"ErrorEquals": ["X"]}]}}}"#,
    );
    assert_eq!(d.code, Code::StatesInvalidErrorEquals);
    let d = first(
        r#"{"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "x", "End": true,
        "Catch": [{"ErrorEquals": ["States.ALL", "X"], "Next": "T"}]}}}"#,
    );
    assert_eq!(d.code, Code::StatesInvalidErrorEquals);
    assert_eq!(
        codes(
            r#"{"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 1, "Timestamp": "2026-01-01T00:00:00Z", "End": true}}}"#
        ),
        vec![Code::StatesConflictingFields]
    );
}

#[test]
fn unsupported_features_are_named_with_their_own_code() {
    let l = load(
        r#"{"StartAt": "P", "States": {"P": {"Type": "Pass", "Assign": {"a": 1}, "End": true}}}"#,
    );
    let d = &l.diagnostics[0];
    assert_eq!(d.code, Code::StatesUnsupported);
    assert!(d.message.contains("Assign"), "{}", d.message);
    assert_eq!(
        codes(
            r#"{"QueryLanguage": "JSONata", "StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% 1 + %}", "End": true}}}"#
        ),
        vec![Code::StatesUnsupported, Code::StatesJsonataSyntax]
    );
}

#[test]
fn max_attempts_counts_retries() {
    let l = load(
        r#"{"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "x", "End": true,
        "Retry": [{"ErrorEquals": ["A"], "MaxAttempts": 0}, {"ErrorEquals": ["States.ALL"]}]}}}"#,
    );
    let p = &l.definitions.processes[0];
    let crate::model::NodeKind::ServiceTask(t) = &p.find("T").unwrap().kind else {
        panic!("not a task")
    };
    assert_eq!(t.retries[0].max_attempts, 1);
    assert_eq!(t.retries[1].max_attempts, 4);
    assert_eq!(t.retries[1].error_equals, None);
    assert_eq!(t.retries[1].initial_delay.as_std().as_secs(), 1);
}
