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
    assert!(l.diagnostics.is_empty(), "{:?}", l.diagnostics);
    assert_eq!(
        codes(
            r#"{"QueryLanguage": "JSONata", "StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% 1 + %}", "End": true}}}"#
        ),
        vec![Code::StatesJsonataSyntax]
    );
    let l = load(
        r#"{"QueryLanguage": "JSONata", "StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% $formatNumber(1, '#') %}", "End": true}}}"#,
    );
    let d = &l.diagnostics[0];
    assert_eq!(d.code, Code::StatesUnsupported);
    assert!(d.message.contains("$formatNumber"), "{}", d.message);
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

/// The first error's code and position (warnings aside).
fn first_error(src: &str) -> (Code, u32, u32) {
    let d = load(src)
        .diagnostics
        .into_iter()
        .find(|d| d.is_error())
        .expect("an error");
    (d.code, d.line, d.column)
}

fn pass_with(params: &str) -> String {
    format!("{{\"StartAt\": \"P\", \"States\": {{\"P\": {{\"Type\": \"Pass\",\n  \"Parameters\": {params}, \"End\": true}}}}}}")
}

#[test]
fn intrinsics_that_can_never_succeed_are_refused_at_load() {
    for call in [
        "States.Hash('x', 'CRC32')",
        "States.Hash($.data, 'CRC32')",
        "States.Format('{} and {}', $.a)",
        "States.Format('{}', $.a, $.b)",
        "States.ArrayRange(1, 5000, 1)",
        "States.ArrayRange(1, 5, 0)",
        "States.ArrayGetItem(States.Array(1, 2), 5)",
        "States.MathAdd('a', 1)",
        "States.MathAdd($.n, 'a')",
        "States.Base64Decode('%%%')",
        "States.StringToJson('{nope')",
        "States.JsonMerge($.a, $.b, true)",
        "States.ArrayLength('abc')",
        "States.StringSplit(States.Array(1), ',')",
    ] {
        let src = pass_with(&format!("{{\"v.$\": \"{call}\"}}"));
        let (code, line, column) = first_error(&src);
        assert_eq!(code, Code::StatesInvalidPath, "{call}");
        assert_eq!((line, column), (2, 25), "{call}");
    }
}

#[test]
fn intrinsics_that_can_succeed_still_load() {
    for call in [
        "States.Hash($.data, 'SHA-256')",
        "States.Format('{} and {}', $.a, 'b')",
        "States.Format('no holes \\\\{\\\\}')",
        "States.ArrayRange(1, 1000, 1)",
        "States.ArrayGetItem(States.Array(1, 2), 1)",
        "States.ArrayGetItem($.items, 5)",
        "States.MathAdd($.n, 1.5)",
        "States.Base64Decode('aGVsbG8=')",
        "States.StringToJson('')",
        "States.JsonMerge($.a, $.b, false)",
        "States.MathRandom(1, 10)",
        "States.UUID()",
    ] {
        let src = pass_with(&format!("{{\"v.$\": \"{call}\"}}"));
        let l = load(&src);
        assert!(l.ok(), "{call}: {:?}", l.diagnostics);
    }
}

#[test]
fn context_paths_outside_the_context_object_are_refused_at_load() {
    for (path, code) in [
        ("$$.Execution.Nope", Code::StatesInvalidPath),
        ("$$.Nope", Code::StatesInvalidPath),
        ("$$.State.Name.x", Code::StatesInvalidPath),
        ("$$.Map.Item.Index", Code::StatesInvalidPath),
        ("$$.Task.Token", Code::StatesUnsupported),
    ] {
        let src = pass_with(&format!("{{\"v.$\": \"{path}\"}}"));
        assert_eq!(first_error(&src), (code, 2, 25), "{path}");
    }
    for path in [
        "$$.Execution.Input.order.lines[0]",
        "$$.Execution.Id",
        "$$.StateMachine.Name",
        "$$.State.RetryCount",
        "$$",
    ] {
        let l = load(&pass_with(&format!("{{\"v.$\": \"{path}\"}}")));
        assert!(l.ok(), "{path}: {:?}", l.diagnostics);
    }
    // Inside a Map (its item selector, the states of its processor) `$$.Map` exists.
    let map = |inner: &str| {
        format!(
            r#"{{"StartAt": "M", "States": {{"M": {{"Type": "Map", "FailOnPartial": true,
            "ItemSelector": {{"i.$": "$$.Map.Item.Index", "v.$": "$$.Map.Item.Value.x"}},
            "ItemProcessor": {{"StartAt": "P", "States": {{"P": {{"Type": "Pass",
            "Parameters": {{"v.$": "{inner}"}}, "End": true}}}}}}, "End": true}}}}}}"#
        )
    };
    let l = load(&map("$$.Map.Item.Value"));
    assert!(l.ok(), "{:?}", l.diagnostics);
    assert_eq!(
        first_error(&map("$$.Map.Item.Nope")).0,
        Code::StatesInvalidPath
    );
    // ... and not in the Map state's own fields.
    let l = load(
        r#"{"StartAt": "M", "States": {"M": {"Type": "Map", "FailOnPartial": true,
        "ResultSelector": {"i.$": "$$.Map.Item.Index"},
        "ItemProcessor": {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}, "End": true}}}"#,
    );
    assert_eq!(
        l.diagnostics.iter().find(|d| d.is_error()).map(|d| d.code),
        Some(Code::StatesInvalidPath)
    );
}

#[test]
fn a_timestamp_needs_a_t_between_date_and_time() {
    let wait = |ts: &str| {
        format!(
            r#"{{"StartAt": "W", "States": {{"W": {{"Type": "Wait", "Timestamp": "{ts}", "End": true}}}}}}"#
        )
    };
    assert_eq!(
        first_error(&wait("2016-12-05 21:29:29Z")),
        (Code::StatesInvalidField, 1, 64)
    );
    assert!(load(&wait("2016-12-05T21:29:29Z")).ok());
}

#[test]
fn a_map_that_names_no_failure_rule_gets_a_warning_and_still_loads() {
    let map = |extra: &str| {
        format!(
            "{{\"StartAt\": \"M\", \"States\": {{\n  \"M\": {{\"Type\": \"Map\", {extra}\"ItemProcessor\": {{\"StartAt\": \"P\", \"States\": {{\"P\": {{\"Type\": \"Pass\", \"End\": true}}}}}}, \"End\": true}}}}}}"
        )
    };
    let l = load(&map(""));
    assert!(l.ok(), "{:?}", l.diagnostics);
    let w = &l.diagnostics[0];
    assert_eq!(w.severity, crate::diag::Severity::Warning);
    assert_eq!(w.code, Code::StatesMapPartialDefault);
    assert_eq!((w.line, w.column), (2, 8));
    assert!(w.message.contains("FailOnPartial"), "{}", w.message);
    for extra in [
        "\"FailOnPartial\": false, ",
        "\"ToleratedFailureCount\": 2, ",
        "\"ToleratedFailurePercentagePath\": \"$.pct\", ",
    ] {
        let l = load(&map(extra));
        assert!(
            l.ok() && l.diagnostics.is_empty(),
            "{extra}: {:?}",
            l.diagnostics
        );
    }
    assert_eq!(
        first_error(&map("\"ToleratedFailurePercentage\": 101, ")).0,
        Code::StatesInvalidField
    );
    assert_eq!(
        first_error(&map(
            "\"MaxConcurrency\": 1, \"MaxConcurrencyPath\": \"$.n\", "
        ))
        .0,
        Code::StatesConflictingFields
    );
}
