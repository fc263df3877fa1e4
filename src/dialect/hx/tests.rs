//! HX loader tests: the document shape, every load check with its position,
//! and the IR it produces.

use super::*;
use crate::codes::{Code, ErrorClass};
use crate::model::{Backoff, FlowKind, Jitter, JoinRule, NodeKind, OnTimeout, TaskImpl};

fn errors(src: &str) -> Vec<(Code, u32, u32)> {
    load(src)
        .errors()
        .map(|d| (d.code, d.line, d.column))
        .collect()
}

fn codes(src: &str) -> Vec<Code> {
    errors(src).into_iter().map(|(c, _, _)| c).collect()
}

fn ok(src: &str) -> crate::model::Process {
    let l = load(src);
    assert!(l.ok(), "{:?}", l.diagnostics);
    l.definitions.processes.into_iter().next().unwrap()
}

const PAYMENT: &str = r#"<workflow id="payment" name="Payment">
  <node id="reserve" type="task" impl="pay.reserve" idempotent="true">
    <retry maxAttempts="4" backoff="exponential" initialDelay="PT1S" maxDelay="PT1M"
           multiplier="3" retryOn="rate_limit transient"/>
    <timeout duration="PT3M" onTimeout="fail"/>
  </node>
  <node id="capture" type="task" impl="pay.capture" idempotent="false"/>
  <node id="release" type="task" impl="pay.release" compensates="reserve"/>
  <node id="cool" type="wait" duration="PT1H"/>
  <node id="big" type="pass"/>
  <node id="done" type="pass" join="any"/>
  <edges>
    <edge from="reserve" to="capture"/>
    <edge from="reserve" to="release" type="compensation"/>
    <edge from="capture" to="cool" type="data"/>
    <edge from="capture" to="big" when="amount > 100"/>
    <edge from="cool" to="done"/>
    <edge from="big" to="done"/>
  </edges>
</workflow>"#;

#[test]
fn a_workflow_compiles_into_the_ir() {
    let p = ok(PAYMENT);
    assert_eq!(p.id, "payment");
    assert_eq!(p.dialect, crate::model::Dialect::Hx);
    let reserve = p.find("reserve").unwrap();
    let NodeKind::ServiceTask(t) = &reserve.kind else {
        panic!("a task")
    };
    assert_eq!(t.implementation, TaskImpl::Registered("pay.reserve".into()));
    assert!(t.idempotent);
    let r = &t.retries[0];
    assert_eq!(r.max_attempts, 4);
    assert_eq!(r.backoff, Backoff::Exponential { coefficient: 3.0 });
    assert_eq!(r.jitter, Jitter::Full, "jitter is on by default");
    assert_eq!(
        r.retry_on,
        Some(vec![ErrorClass::RateLimit, ErrorClass::Transient])
    );
    assert_eq!(r.max_delay.unwrap().as_std().as_secs(), 60);
    let timeout = t.timeout.as_ref().unwrap();
    assert_eq!(timeout.on_timeout, OnTimeout::Fail);
    assert_eq!(timeout.duration.as_std().as_secs(), 180);
    assert_eq!(reserve.join, Some(JoinRule::All));
    assert_eq!(p.find("done").unwrap().join, Some(JoinRule::Any));
    assert!(matches!(p.find("cool").unwrap().kind, NodeKind::Catch(_)));
    // The synthetic start leads to the one entry node; the compensator is no entry.
    let start = p.find(START_ID).unwrap();
    let entries: Vec<&str> = start
        .outgoing
        .iter()
        .map(|&f| p.node(p.flow(f).target).id.as_str())
        .collect();
    assert_eq!(entries, vec!["reserve"]);
    assert_eq!(
        p.compensator(reserve.ix).map(|c| p.node(c).id.as_str()),
        Some("release")
    );
    let guarded = p.flows.iter().find(|f| f.id == "capture->big").unwrap();
    assert!(guarded.condition.is_some());
    assert_eq!(guarded.kind, FlowKind::Sequence);
    assert_eq!(
        p.registered_tasks(),
        vec!["pay.capture", "pay.release", "pay.reserve"]
    );
}

#[test]
fn defaults_one_attempt_and_every_class() {
    let p = ok(
        r#"<workflow id="w"><node id="a" type="task" impl="m"><retry/></node><node id="b" type="task" impl="m"/></workflow>"#,
    );
    let NodeKind::ServiceTask(a) = &p.find("a").unwrap().kind else {
        panic!()
    };
    assert_eq!(a.retries[0].max_attempts, 3);
    assert_eq!(a.retries[0].retry_on.as_ref().unwrap().len(), 6);
    assert_eq!(a.retries[0].initial_delay.as_std().as_secs(), 1);
    assert_eq!(
        a.retries[0].backoff,
        Backoff::Exponential { coefficient: 2.0 }
    );
    let NodeKind::ServiceTask(b) = &p.find("b").unwrap().kind else {
        panic!()
    };
    assert!(b.retries.is_empty(), "no <retry>: one attempt");
    // Both are entry nodes.
    assert_eq!(p.find(START_ID).unwrap().outgoing.len(), 2);
}

#[test]
fn any_namespace_is_accepted_for_the_root_and_its_children() {
    let p = ok(
        r#"<hx:workflow xmlns:hx="urn:hx" id="w"><hx:node id="a" type="pass"/><hx:edges/></hx:workflow>"#,
    );
    assert!(p.find("a").is_some());
    assert_eq!(
        codes(
            r#"<hx:workflow xmlns:hx="urn:hx" id="w"><hx:node id="b" type="pass"/><node id="a" type="pass"/></hx:workflow>"#
        ),
        vec![Code::HxUnknownElement]
    );
}

#[test]
fn hx_3301_non_idempotent_with_retry_at_its_node() {
    let src = "<workflow id=\"w\">\n  <node id=\"c\" type=\"task\" impl=\"m\" idempotent=\"false\">\n    <retry maxAttempts=\"2\"/>\n  </node>\n</workflow>";
    assert_eq!(errors(src), vec![(Code::HxNonIdempotentRetry, 2, 3)]);
}

#[test]
fn hx_2004_compensates_disagrees_with_the_edge() {
    let src = "<workflow id=\"w\">\n<node id=\"a\" type=\"task\" impl=\"m\"/>\n<node id=\"b\" type=\"task\" impl=\"m\"/>\n  <node id=\"undo\" type=\"task\" impl=\"m\" compensates=\"b\"/>\n<edges><edge from=\"a\" to=\"b\"/><edge from=\"a\" to=\"undo\" type=\"compensation\"/></edges>\n</workflow>";
    assert_eq!(errors(src), vec![(Code::HxCompensatesMismatch, 4, 3)]);
    // compensates= with no compensation edge at all.
    let src = "<workflow id=\"w\">\n<node id=\"a\" type=\"task\" impl=\"m\"/>\n<node id=\"undo\" type=\"task\" impl=\"m\" compensates=\"a\"/>\n</workflow>";
    assert_eq!(errors(src), vec![(Code::HxCompensatesMismatch, 3, 1)]);
}

#[test]
fn hx_2005_compensator_reachable_by_a_forward_edge() {
    let src = "<workflow id=\"w\">\n<node id=\"a\" type=\"task\" impl=\"m\"/>\n<node id=\"undo\" type=\"task\" impl=\"m\" compensates=\"a\"/>\n<edges>\n  <edge from=\"a\" to=\"undo\" type=\"compensation\"/>\n    <edge from=\"a\" to=\"undo\" type=\"data\"/>\n</edges>\n</workflow>";
    assert_eq!(errors(src), vec![(Code::HxCompensatorReachable, 6, 5)]);
}

#[test]
fn hx_3401_months_and_years_apart_from_malformed_durations() {
    let src = "<workflow id=\"w\">\n<node id=\"a\" type=\"task\" impl=\"m\">\n <timeout duration=\"P1M\"/>\n</node>\n<node id=\"b\" type=\"task\" impl=\"m\">\n  <retry initialDelay=\"P1Y\"/>\n</node>\n<node id=\"c\" type=\"wait\" duration=\"soon\"/>\n</workflow>";
    assert_eq!(
        errors(src),
        vec![
            (Code::HxDurationUnsupported, 3, 2),
            (Code::HxDurationUnsupported, 6, 3),
            (Code::HxDurationMalformed, 8, 1),
        ]
    );
}

#[test]
fn graph_errors_have_their_own_codes() {
    let w = |body: &str| format!("<workflow id=\"w\">{body}</workflow>");
    let a = r#"<node id="a" type="pass"/>"#;
    let b = r#"<node id="b" type="pass"/>"#;
    assert_eq!(codes(&w(&format!("{a}{a}"))), vec![Code::HxDuplicateId]);
    assert_eq!(
        codes(&w(&format!(
            r#"{a}<edges><edge from="a" to="zz"/></edges>"#
        ))),
        vec![Code::HxDanglingEdge]
    );
    assert_eq!(
        codes(&w(&format!(
            r#"{a}{b}<edges><edge from="a" to="b"/><edge from="b" to="a"/></edges>"#
        ))),
        vec![Code::HxCycle]
    );
    assert_eq!(
        codes(&w(&format!(r#"{a}<edges><edge from="a" to="a"/></edges>"#))),
        vec![Code::HxCycle]
    );
    assert_eq!(
        codes(&w(&format!(
            r#"{a}{b}<edges><edge from="a" to="b"/><edge from="a" to="b" type="data"/></edges>"#
        ))),
        vec![Code::HxInvalidEdge],
        "a duplicate edge"
    );
    assert_eq!(
        codes(&w(&format!(
            r#"{a}{b}<edges><edge from="a" to="b" type="error"/></edges>"#
        ))),
        vec![Code::HxInvalidEdge],
        "a pass node cannot fail"
    );
    assert_eq!(
        codes(&w(&format!(
            r#"{a}{b}<edges><edge from="a" to="b" type="data" when="true"/></edges>"#
        ))),
        vec![Code::HxInvalidEdge],
        "a guard on a data edge"
    );
    assert_eq!(
        codes(&w(r#"<node id="a" type="teleport"/>"#)),
        vec![Code::HxUnknownNodeType]
    );
    assert_eq!(
        codes(&w(r#"<node id="a" type="pass" colour="red"/>"#)),
        vec![Code::HxUnknownAttribute]
    );
    assert_eq!(
        codes(&w(r#"<node id="a" type="wait" impl="m" duration="PT1S"/>"#)),
        vec![Code::HxUnknownAttribute],
        "impl belongs to tasks"
    );
    assert_eq!(
        codes(&w(r#"<node id="a" type="task"/>"#)),
        vec![Code::HxInvalidAttribute]
    );
    assert_eq!(
        codes(&w(r#"<node id="a" type="pass"/><step id="x"/>"#)),
        vec![Code::HxUnknownElement]
    );
    assert_eq!(codes(&w("")), vec![Code::HxEmptyWorkflow]);
    assert_eq!(
        codes(&w(&format!(
            r#"{a}<edges><edge from="a" to="a" when="("/></edges>"#
        ))),
        vec![Code::ConditionSyntax]
    );
    assert_eq!(
        codes(r#"<workflow><node id="a" type="pass"/></workflow>"#),
        vec![Code::HxNotWorkflow]
    );
}

#[test]
fn retry_and_timeout_values_are_checked() {
    let t = |inner: &str| {
        codes(&format!(
            r#"<workflow id="w"><node id="a" type="task" impl="m">{inner}</node></workflow>"#
        ))
    };
    for bad in [
        r#"<retry maxAttempts="0"/>"#,
        r#"<retry backoff="random"/>"#,
        r#"<retry multiplier="-1"/>"#,
        r#"<retry jitter="maybe"/>"#,
        r#"<retry retryOn="cosmic"/>"#,
        r#"<retry retryOn=""/>"#,
    ] {
        assert_eq!(t(bad), vec![Code::HxInvalidRetry], "{bad}");
    }
    assert_eq!(
        t(r#"<timeout duration="PT1S" onTimeout="pray"/>"#),
        vec![Code::HxInvalidTimeout]
    );
    assert_eq!(t(r#"<timeout/>"#), vec![Code::HxInvalidTimeout]);
    assert_eq!(t(r#"<retry/><retry/>"#), vec![Code::HxUnknownElement]);
}

#[test]
fn compensation_rules() {
    let w = |body: &str| {
        codes(&format!(
            r#"<workflow id="w"><node id="a" type="task" impl="m"/><node id="u" type="task" impl="m"/><node id="v" type="task" impl="m"/><edges>{body}</edges></workflow>"#
        ))
    };
    assert_eq!(
        w(
            r#"<edge from="a" to="u" type="compensation"/><edge from="a" to="v" type="compensation"/>"#
        ),
        vec![Code::HxInvalidEdge],
        "two compensators"
    );
    assert_eq!(
        w(
            r#"<edge from="a" to="u" type="compensation"/><edge from="u" to="v" type="compensation"/>"#
        ),
        vec![Code::HxInvalidEdge],
        "a rollback of a rollback"
    );
    assert_eq!(
        w(r#"<edge from="a" to="u" type="compensation"/><edge from="u" to="v"/>"#),
        vec![Code::HxInvalidEdge],
        "a compensator leading somewhere"
    );
}

#[test]
fn hostile_xml_is_refused_as_for_bpmn() {
    let d = load(
        "<?xml version=\"1.0\"?>\n<!DOCTYPE workflow [<!ENTITY x \"y\">]>\n<workflow id=\"w\"/>",
    );
    assert_eq!(d.errors().next().unwrap().code, Code::XmlDtdForbidden);
    let deep = format!("<workflow id=\"w\">{}", "<node>".repeat(300));
    assert_eq!(
        load(&deep).errors().next().unwrap().code,
        Code::XmlLimitExceeded
    );
    assert_eq!(
        load("<workflow id=\"w\"><node")
            .errors()
            .next()
            .unwrap()
            .code,
        Code::XmlMalformed
    );
}

#[test]
fn the_dialect_sniffer_routes_workflows_here() {
    let l = crate::dialect::load(PAYMENT);
    assert!(l.ok());
    assert_eq!(
        l.definitions.processes[0].dialect,
        crate::model::Dialect::Hx
    );
}

/// An if/else: `check` routes to `a` or `b` and both meet at `join`.
fn if_else(guard_a: &str, guard_b: &str, join: &str) -> String {
    format!(
        r#"<workflow id="w">
  <node id="check" type="task" impl="t"/>
  <node id="a" type="pass"/>
  <node id="b" type="task" impl="t"/>
  <node id="join" type="pass"{join}/>
  <edges>
    <edge from="check" to="a" when="{guard_a}"/>
    <edge from="check" to="b" when="{guard_b}"/>
    <edge from="a" to="join"/>
    <edge from="b" to="join"/>
  </edges>
</workflow>"#
    )
}

#[test]
fn a_join_all_after_an_if_else_is_refused_with_its_position() {
    for (a, b) in [
        ("amount &gt; 100", "!(amount &gt; 100)"),
        ("amount &gt; 100", "amount &lt;= 100"),
        ("kind == 'x'", "kind != 'x'"),
        ("kind == 'x'", "kind == 'y'"),
    ] {
        assert_eq!(
            errors(&if_else(a, b, "")),
            vec![(Code::HxJoinUnsatisfiable, 5, 3)],
            "{a} / {b}"
        );
        let l = load(&if_else(a, b, ""));
        let d = l.errors().next().unwrap();
        assert!(d.message.contains("join=\"any\""), "{}", d.message);
        // The fix loads, and so do guards that may both hold.
        ok(&if_else(a, b, r#" join="any""#));
    }
    ok(&if_else("amount &gt; 100", "amount &gt; 50", ""));
    ok(&if_else("amount &gt; 100", "urgent", ""));
}

#[test]
fn a_join_all_after_a_task_and_its_error_edge_is_refused() {
    let src = |join: &str| {
        format!(
            r#"<workflow id="w">
  <node id="pay" type="task" impl="t"/>
  <node id="fallback" type="task" impl="t"/>
  <node id="notify" type="task" impl="t"/>
  <node id="end" type="pass"{join}/>
  <edges>
    <edge from="pay" to="fallback" type="error"/>
    <edge from="pay" to="notify"/>
    <edge from="fallback" to="end"/>
    <edge from="notify" to="end"/>
  </edges>
</workflow>"#
        )
    };
    assert_eq!(errors(&src("")), vec![(Code::HxJoinUnsatisfiable, 5, 3)]);
    ok(&src(r#" join="any""#));
}

#[test]
fn a_when_whose_constant_part_cannot_evaluate_is_refused_with_its_position() {
    let src = |when: &str| {
        format!(
            r#"<workflow id="w">
  <node id="a" type="pass"/>
  <node id="b" type="pass"/>
  <edges>
    <edge from="a" to="b" when="{when}"/>
  </edges>
</workflow>"#
        )
    };
    for bad in [
        "1 + &quot;a&quot; == 2",
        "x &gt; 1 &amp;&amp; 1 / 0 == 1",
        "2 + 2",
    ] {
        assert_eq!(
            errors(&src(bad)),
            vec![(Code::ConditionInvalid, 5, 5)],
            "{bad}"
        );
    }
    ok(&src("x + 1 == 2"));
}
