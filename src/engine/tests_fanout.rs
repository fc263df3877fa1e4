//! Fan-outs at scale (issue 33 item 1): a step starts at most
//! `FANOUT_STARTS_PER_STEP` iterations and continues on a continue park; at
//! most a window of iterations runs at once; the results keep their order.
//! Pure engine steps on definitions loaded by the real loaders.

use super::fanout::{FANOUT_STARTS_PER_STEP, WINDOW_MAX};
use super::*;
use crate::model::Process;
use chrono::TimeZone;
use serde_json::{json, Value};

fn load(def: &str) -> Process {
    let l = crate::dialect::load(def);
    assert!(l.errors().next().is_none(), "{:?}", l.diagnostics);
    l.definitions.processes.into_iter().next().unwrap()
}

fn inputs() -> Inputs {
    Inputs {
        now: chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
        draw: 0.5,
        attempt_lease: std::time::Duration::from_secs(60),
        journal: true,
    }
}

fn begin(p: &Process, vars: Value) -> Step {
    start(
        p,
        NewInstance {
            instance_id: "i1",
            tenant: "t",
            deployment_id: "d",
            start_node: None,
            variables: vars.as_object().cloned().unwrap(),
        },
        &inputs(),
    )
    .unwrap()
}

fn started(step: &Step) -> usize {
    step.effects
        .iter()
        .filter(|e| matches!(e, Effect::Journal(j) if j.kind == "branch_started"))
        .count()
}

/// The parks the effects armed and withdrew agree with the snapshot.
fn check_parks(before: &Snapshot, step: &Step) {
    let mut parks: std::collections::BTreeSet<u64> = before.parks.keys().copied().collect();
    for e in &step.effects {
        match e {
            Effect::Arm { seq, .. } => assert!(parks.insert(*seq), "park {seq} armed twice"),
            Effect::Withdraw { seq } => assert!(parks.remove(seq), "park {seq} not armed"),
            Effect::Ended { .. } => parks.clear(),
            _ => {}
        }
    }
    let now: std::collections::BTreeSet<u64> = step.snapshot.parks.keys().copied().collect();
    assert_eq!(parks, now);
    for t in &step.snapshot.tokens {
        for p in t.parks() {
            assert!(
                now.contains(&p),
                "token {} owns park {p} not in the snapshot",
                t.id
            );
        }
    }
}

/// Fire the one continue park of each step until the instance ends; every
/// step starts at most the budget. The steps it took.
fn run_on(p: &Process, mut step: Step) -> (Snapshot, usize) {
    let mut steps = 1;
    assert!(started(&step) <= FANOUT_STARTS_PER_STEP as usize);
    while !step.snapshot.state.is_terminal() {
        let (&park, kind) = step
            .snapshot
            .parks
            .iter()
            .map(|(s, p)| (s, p.kind))
            .next()
            .expect("a continued fan-out has its park");
        assert_eq!(kind, ParkKind::Continue, "{:?}", step.snapshot.parks);
        assert_eq!(step.snapshot.parks.len(), 1);
        let before = step.snapshot.clone();
        // Each step resumes from the stored text, as after a restart.
        let stored = Snapshot::from_json(&step.snapshot.to_json()).unwrap();
        assert_eq!(stored, before, "the stored snapshot loads as it was");
        step = apply(p, stored, Event::ParkFired { park }, &inputs()).unwrap();
        check_parks(&before, &step);
        assert!(started(&step) <= FANOUT_STARTS_PER_STEP as usize);
        steps += 1;
        assert!(steps < 1_000, "no end in sight");
    }
    (step.snapshot, steps)
}

const MAP_BOMB: &str = r#"{"StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$.xs","ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}},"End":true}}}"#;

#[test]
fn a_map_over_ten_thousand_items_continues_step_after_step_in_order() {
    let p = load(MAP_BOMB);
    let xs: Vec<u32> = (0..10_000).collect();
    let step = begin(&p, json!({ "xs": xs }));
    assert_eq!(
        step.snapshot.state,
        InstanceState::Waiting,
        "{:?}",
        step.snapshot.error
    );
    assert_eq!(started(&step), FANOUT_STARTS_PER_STEP as usize);
    let (snap, steps) = run_on(&p, step);
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["output"], json!(xs));
    let per = FANOUT_STARTS_PER_STEP as usize;
    assert_eq!(steps, xs.len().div_ceil(per));
}

/// The step's snapshot as stored, as loaded back (it must load as it was),
/// and as it ends when run on from there.
fn run_from_store(p: &Process, mut step: Step) -> (String, Snapshot, Snapshot) {
    let text = step.snapshot.to_json();
    let back = Snapshot::from_json(&text).unwrap();
    assert_eq!(back, step.snapshot);
    let (end, _) = run_on(
        p,
        Step {
            snapshot: back.clone(),
            ..step
        },
    );
    assert_eq!(end.state, InstanceState::Completed, "{:?}", end.error);
    (text, back, end)
}

/// How often `needle` occurs in `text`.
fn occurrences(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[test]
fn a_wide_map_stores_its_list_once_and_loads_it_back() {
    // The list is in the start input, the variables (the document's
    // mirror), the Map token's document and the items: stored, only the
    // document holds it (issue 33 item 1).
    let p = load(MAP_BOMB);
    let xs: Vec<String> = (0..2_000).map(|i| format!("x-{i:05}")).collect();
    let step = begin(&p, json!({ "xs": xs }));
    let (text, back, end) = run_from_store(&p, step);
    // Slot 1,999 has not started: it is only in the document.
    assert_eq!(occurrences(&text, "\"x-01999\""), 1, "{}", &text[..300]);
    let stored: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        stored["format"],
        json!(super::snapshot::SNAPSHOT_FORMAT_ELIDED)
    );
    assert_eq!(back.variables["xs"], json!(xs));
    assert_eq!(back.input["xs"], json!(xs));
    assert_eq!(end.variables["output"], json!(xs));
}

#[test]
fn a_map_reads_its_items_where_its_paths_name_them_or_keeps_a_copy() {
    // Under an InputPath: still read in the document (one copy stored).
    let p = load(
        r#"{"StartAt":"M","States":{"M":{"Type":"Map","InputPath":"$.wrap","ItemsPath":"$.xs",
        "ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}},"End":true}}}"#,
    );
    let xs: Vec<String> = (0..600).map(|i| format!("w-{i:05}")).collect();
    let mut step = begin(&p, json!({ "wrap": { "xs": xs } }));
    assert_eq!(occurrences(&step.snapshot.to_json(), "\"w-00599\""), 1);
    let (snap, _) = run_on(&p, step);
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["output"], json!(xs));
    // Items from the context object are not in the document: the state
    // keeps them, and they still run in order.
    let p = load(
        r#"{"StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$$.Execution.Input.xs",
        "ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}},"End":true}}}"#,
    );
    let step = begin(&p, json!({ "xs": xs }));
    let (snap, _) = run_on(&p, step);
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["output"], json!(xs));
    // A name step does not index an array (as a pointer would).
    let p = load(
        r#"{"StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$.xs['0']",
        "ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}},"End":true}}}"#,
    );
    let step = begin(&p, json!({ "xs": [[1, 2]] }));
    assert_eq!(step.snapshot.state, InstanceState::Failed);
    assert_eq!(
        step.snapshot.error.as_ref().map(|e| e.code.as_str()),
        Some(crate::codes::Code::StatesItemsNotArray.as_str())
    );
}

#[test]
fn a_wide_multi_instance_body_does_not_store_its_start_input_again() {
    let p = empty_mi_sub_process("item");
    let items: Vec<String> = (0..2_000).map(|i| format!("i-{i:05}")).collect();
    let step = begin(&p, json!({ "items": items, "who": "ada" }));
    let (text, back, end) = run_from_store(&p, step);
    // Slot 0 ended in the first step: its element is in the variables and
    // its result, not a third time in the start input; slot 1,999 has not
    // started: it is in the variables only, not again in the body's items.
    assert_eq!(occurrences(&text, "\"i-00000\""), 2);
    assert_eq!(occurrences(&text, "\"i-01999\""), 1);
    assert_eq!(back.input["who"], json!("ada"));
    assert_eq!(end.variables["out"], json!(items));
    assert_eq!(end.input["items"], json!(items));
}

#[test]
fn a_multi_instance_body_keeps_its_collection_when_the_variable_changes_under_it() {
    // The body waits, so the instance does; an operator then replaces the
    // collection variable: the body still runs over the elements it began
    // with (BPMN reads the collection once), and the stored snapshot, which
    // can no longer take them from the variable, keeps them itself.
    let p = load(&bpmn(
        r#"<bpmn:subProcess id="T">
  <bpmn:multiInstanceLoopCharacteristics><bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="item"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
  <bpmn:startEvent id="s0"/>
  <bpmn:intermediateCatchEvent id="w"><bpmn:timerEventDefinition><bpmn:timeDuration>PT5S</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
  <bpmn:endEvent id="s9"/>
  <bpmn:sequenceFlow id="s1" sourceRef="s0" targetRef="w"/>
  <bpmn:sequenceFlow id="s2" sourceRef="w" targetRef="s9"/>
</bpmn:subProcess>"#,
    ));
    let items: Vec<String> = (0..300).map(|i| format!("k-{i:05}")).collect();
    let mut snap = begin(&p, json!({ "items": items })).snapshot;
    assert_eq!(snap.state, InstanceState::Waiting, "{:?}", snap.error);
    assert_eq!(occurrences(&snap.to_json(), "\"k-00299\""), 1);
    let set = json!({ "items": ["other"] }).as_object().cloned().unwrap();
    let edit = Event::EditVariables {
        set,
        unset: Vec::new(),
        by: None,
    };
    snap = apply(&p, snap, edit, &inputs()).unwrap().snapshot;
    let text = snap.to_json();
    // In the body's items, and in the start input (no longer equal to the
    // variables).
    assert_eq!(occurrences(&text, "\"k-00299\""), 2);
    let later = Inputs {
        now: inputs().now + chrono::Duration::seconds(5),
        ..inputs()
    };
    snap = Snapshot::from_json(&text).unwrap();
    while !snap.state.is_terminal() {
        let park = *snap.parks.keys().next().unwrap();
        let mut next = apply(&p, snap, Event::ParkFired { park }, &later).unwrap();
        snap = Snapshot::from_json(&next.snapshot.to_json()).unwrap();
        assert_eq!(snap, next.snapshot);
    }
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["out"], json!(items));
    assert_eq!(snap.variables["items"], json!(["other"]));
}

#[test]
fn an_iteration_still_reads_the_execution_input_and_its_item() {
    let p = load(
        r#"{"StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$.xs",
        "ItemSelector":{"v.$":"$$.Map.Item.Value","k.$":"$$.Execution.Input.k"},
        "ItemProcessor":{"StartAt":"P","States":{"P":{"Type":"Pass",
        "Parameters":{"v.$":"$.v","k.$":"$.k","all.$":"States.ArrayLength($$.Execution.Input.xs)"},"End":true}}},
        "End":true}}}"#,
    );
    let step = begin(&p, json!({ "xs": [10, 20], "k": "K" }));
    assert_eq!(
        step.snapshot.state,
        InstanceState::Completed,
        "{:?}",
        step.snapshot.error
    );
    assert_eq!(
        step.snapshot.variables["output"],
        json!([{"v": 10, "k": "K", "all": 2}, {"v": 20, "k": "K", "all": 2}])
    );
}

#[test]
fn a_map_without_max_concurrency_runs_a_window_of_iterations_at_once() {
    let p = load(
        r#"{"StartAt":"M","States":{"M":{"Type":"Map","ItemsPath":"$.xs",
        "ItemProcessor":{"StartAt":"W","States":{"W":{"Type":"Wait","Seconds":5,"End":true}}},
        "End":true}}}"#,
    );
    let xs: Vec<u32> = (0..150).collect();
    let step = begin(&p, json!({ "xs": xs }));
    let window = crate::model::DEFAULT_MAX_CONCURRENCY as usize;
    assert_eq!(step.snapshot.parks.len(), window);
    // Each wait that ends lets one more start, in order; all end in order.
    let mut snap = step.snapshot;
    let later = Inputs {
        now: inputs().now + chrono::Duration::seconds(5),
        ..inputs()
    };
    while !snap.state.is_terminal() {
        let park = *snap.parks.keys().next().unwrap();
        snap = apply(&p, snap, Event::ParkFired { park }, &later)
            .unwrap()
            .snapshot;
        assert!(snap.parks.len() <= window);
    }
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["output"], json!(xs));
    // An explicit concurrency over the ceiling is held to it.
    assert_eq!(super::fanout::window(u32::MAX), WINDOW_MAX);
    assert_eq!(super::fanout::window(7), 7);
}

fn bpmn(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    {body}
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="T"/>
    <bpmn:sequenceFlow id="f1" sourceRef="T" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// A multi-instance embedded sub-process over `items` that never waits,
/// each iteration's result `output` (CEL), the results in `out`.
fn empty_mi_sub_process(output: &str) -> Process {
    load(&bpmn(&format!(
        r#"<bpmn:subProcess id="T">
  <bpmn:multiInstanceLoopCharacteristics><bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="{output}"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
  <bpmn:startEvent id="s0"/>
  <bpmn:endEvent id="s9"/>
  <bpmn:sequenceFlow id="s1" sourceRef="s0" targetRef="s9"/>
</bpmn:subProcess>"#
    )))
}

#[test]
fn a_multi_instance_sub_process_over_ten_thousand_items_continues_step_after_step() {
    // An embedded sub-process that never waits: every iteration ends in the
    // step that starts it (it used to end the instance at STEP_LIMIT).
    let p = empty_mi_sub_process("item + item");
    let items: Vec<u64> = (0..10_000).collect();
    let step = begin(&p, json!({ "items": items }));
    assert_eq!(
        step.snapshot.state,
        InstanceState::Waiting,
        "{:?}",
        step.snapshot.error
    );
    let (snap, steps) = run_on(&p, step);
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    let doubled: Vec<u64> = items.iter().map(|i| i * 2).collect();
    assert_eq!(snap.variables["out"], json!(doubled));
    assert_eq!(steps, items.len().div_ceil(FANOUT_STARTS_PER_STEP as usize));
}

#[test]
fn cancelling_a_continued_fan_out_withdraws_its_continue_park() {
    let p = load(MAP_BOMB);
    let xs: Vec<u32> = (0..1_000).collect();
    let step = begin(&p, json!({ "xs": xs }));
    assert_eq!(step.snapshot.parks.len(), 1);
    let before = step.snapshot.clone();
    let step = apply(&p, step.snapshot, Event::Cancel { reason: None }, &inputs()).unwrap();
    check_parks(&before, &step);
    assert_eq!(step.snapshot.state, InstanceState::Terminated);
    assert!(step.snapshot.parks.is_empty());
}
