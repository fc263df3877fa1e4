use super::*;
use quick_xml::events::Event;
use std::collections::{HashMap, HashSet};

fn processes(source: &str) -> Vec<Process> {
    let loaded = crate::dialect::load(source);
    assert!(loaded.ok(), "{:?}", loaded.diagnostics);
    loaded.definitions.processes
}

fn file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// What an exported document holds: element id → (local tag, sutra:node), and the DI's placed ids.
struct Parsed {
    elements: HashMap<String, (String, Option<String>)>,
    shapes: HashSet<String>,
    edges: HashMap<String, usize>,
}

fn parse(xml: &str) -> Parsed {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut p = Parsed {
        elements: HashMap::new(),
        shapes: HashSet::new(),
        edges: HashMap::new(),
    };
    let mut edge: Option<String> = None;
    loop {
        let ev = reader.read_event().expect("well-formed XML");
        let (e, empty) = match ev {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) => {
                if e.local_name().as_ref() == b"BPMNEdge" {
                    edge = None;
                }
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let tag = String::from_utf8(e.local_name().as_ref().to_vec()).unwrap();
        let attrs: HashMap<String, String> = e
            .attributes()
            .map(|a| {
                let a = a.unwrap();
                (
                    String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                    a.unescape_value().unwrap().into_owned(),
                )
            })
            .collect();
        match tag.as_str() {
            "BPMNShape" => {
                p.shapes.insert(attrs["bpmnElement"].clone());
            }
            "BPMNEdge" => {
                p.edges.insert(attrs["bpmnElement"].clone(), 0);
                if !empty {
                    edge = Some(attrs["bpmnElement"].clone());
                }
            }
            "waypoint" => {
                *p.edges.get_mut(edge.as_ref().unwrap()).unwrap() += 1;
            }
            _ => {
                if let Some(id) = attrs.get("id") {
                    let prev = p
                        .elements
                        .insert(id.clone(), (tag, attrs.get("sutra:node").cloned()));
                    assert!(prev.is_none(), "id {id} twice");
                }
            }
        }
    }
    p
}

/// Every node and flow is in the export, placed, and mapped back by `sutra:node`.
fn check_complete(p: &Process, xml: &str) -> Parsed {
    let parsed = parse(xml);
    let by_node: HashMap<&str, &str> = parsed
        .elements
        .iter()
        .filter_map(|(id, (_, n))| n.as_deref().map(|n| (n, id.as_str())))
        .collect();
    for n in &p.nodes {
        let id = by_node
            .get(n.id.as_str())
            .unwrap_or_else(|| panic!("node {} missing", n.id));
        assert!(parsed.shapes.contains(*id), "node {} has no shape", n.id);
    }
    for f in &p.flows {
        let id = by_node
            .get(f.id.as_str())
            .unwrap_or_else(|| panic!("flow {} missing", f.id));
        assert!(
            parsed.edges.get(*id).copied().unwrap_or(0) >= 2,
            "flow {} has no waypoints",
            f.id
        );
    }
    parsed
}

#[test]
fn every_dialect_exports_every_node_and_flow() {
    for path in [
        "examples/order-flow.bpmn",
        "examples/payment.hx.xml",
        "examples/order-lines.asl.json",
        "tests/fixtures/hx/valid/branches.hx.xml",
        "tests/fixtures/bpmn/valid/subprocess_errors.bpmn",
        "tests/fixtures/bpmn/valid/loops_and_terminate.bpmn",
        "tests/fixtures/bpmn/valid/timers_all_hosts.bpmn",
        "tests/fixtures/bpmn/valid/messages_and_sources.bpmn",
    ] {
        let source = file(path);
        for p in processes(&source) {
            let d = diagram(&source, &p);
            assert!(d.generated, "{path} has no DI");
            check_complete(&p, &d.xml);
            assert_eq!(d.xml, export(&p), "deterministic");
        }
    }
}

#[test]
fn a_bpmn_file_with_complete_di_is_answered_as_written() {
    let source = file("tests/fixtures/bpmn/valid/miwg_A.1.0_executable.bpmn");
    let p = &processes(&source)[0];
    let d = diagram(&source, p);
    assert!(!d.generated);
    assert_eq!(d.xml, source);
}

#[test]
fn hostile_ids_and_names_stay_text_and_ids_stay_xml_names() {
    let source = r#"{"StartAt": "a <b> & \"c\"", "States": {
        "a <b> & \"c\"": {"Type": "Pass", "Result": 1, "Next": "<script>alert(1)</script>"},
        "<script>alert(1)</script>": {"Type": "Choice",
            "Choices": [{"Variable": "$.x", "NumericEquals": 1, "Next": "a <b> & \"c\""}],
            "Default": "end"},
        "end": {"Type": "Succeed"}}}"#;
    for p in processes(source) {
        let xml = export(&p);
        let parsed = check_complete(&p, &xml);
        for id in parsed.elements.keys() {
            assert!(is_xml_name(id), "{id} is no XML name");
        }
        assert!(!xml.contains("<script>"), "{xml}");
    }
}

#[test]
fn loops_lay_out_without_overlaps() {
    let source = file("tests/fixtures/bpmn/valid/loops_and_terminate.bpmn");
    for p in processes(&source) {
        let lay = layout::layout(&p);
        let top: Vec<_> = p
            .nodes
            .iter()
            .filter(|n| n.scope.is_none() && !matches!(n.kind, NodeKind::Boundary(_)))
            .map(|n| lay.nodes[n.ix.0 as usize])
            .collect();
        for (i, a) in top.iter().enumerate() {
            for b in &top[i + 1..] {
                let apart =
                    a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
                assert!(apart, "{a:?} overlaps {b:?}");
            }
        }
    }
}

#[test]
fn flows_say_when_they_are_taken_and_states_show_their_names() {
    let asl = r#"{"StartAt": "Check", "States": {
        "Check": {"Type": "Choice", "Choices": [
            {"Variable": "$.amount", "NumericGreaterThan": 100, "Next": "Review"},
            {"And": [{"Variable": "$.kind", "StringMatches": "gift*"}, {"Not": {"Variable": "$.vip", "IsPresent": true}}], "Next": "Review"}
        ], "Default": "Done"},
        "Review": {"Type": "Pass", "Next": "Done"},
        "Done": {"Type": "Succeed"}}}"#;
    let xml = export(&processes(asl).remove(0));
    assert!(xml.contains(r#"name="$.amount &gt; 100""#), "{xml}");
    assert!(
        xml.contains(r#"name="$.kind matches &quot;gift*&quot; and not ($.vip is present)""#),
        "{xml}"
    );
    assert!(xml.contains(r#"name="default""#), "{xml}");
    assert!(
        xml.contains(r#"<bpmn:exclusiveGateway id="Check" name="Check""#),
        "{xml}"
    );
    assert!(xml.contains(r#"name="Done""#), "{xml}");
    // A BPMN condition is drawn as written; a BPMN id is never shown as a name.
    let bpmn = file("tests/fixtures/bpmn/valid/conditional_flows.bpmn");
    let xml = export(&processes(&bpmn).remove(0));
    assert!(xml.contains(r#"name="amount &gt; 100""#), "{xml}");
    assert!(xml.contains(r#"name="tier == &apos;gold&apos;""#), "{xml}");
}

#[test]
fn the_containers_the_loaders_make_read_as_branches_and_iterations() {
    let asl = r#"{"StartAt": "Both", "States": {
      "Both": {"Type": "Parallel", "Next": "Lines", "Branches": [
        {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}},
        {"StartAt": "B", "States": {"B": {"Type": "Pass", "End": true}}}]},
      "Lines": {"Type": "Map", "End": true, "ItemProcessor": {"StartAt": "Line",
        "States": {"Line": {"Type": "Pass", "End": true}}}}}}"#;
    let xml = export(&processes(asl)[0]);
    assert!(xml.contains("name=\"Both \u{b7} branch 1\""), "{xml}");
    assert!(xml.contains("name=\"Both \u{b7} branch 2\""), "{xml}");
    assert!(xml.contains("name=\"Lines \u{b7} each item\""), "{xml}");
    assert!(!xml.contains("name=\"Lines#iteration\""), "{xml}");
    let bpmn = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="x">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="Activity_1x"/>
    <bpmn:subProcess id="Activity_1x" name="Pack lines">
      <bpmn:multiInstanceLoopCharacteristics isSequential="true"><bpmn:loopCardinality>3</bpmn:loopCardinality></bpmn:multiInstanceLoopCharacteristics>
      <bpmn:startEvent id="ss"/>
      <bpmn:sequenceFlow id="f2" sourceRef="ss" targetRef="ee"/>
      <bpmn:endEvent id="ee"/>
    </bpmn:subProcess>
    <bpmn:sequenceFlow id="f3" sourceRef="Activity_1x" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>"#;
    let xml = export(&processes(bpmn)[0]);
    assert!(
        xml.contains("name=\"Pack lines\" sutra:node=\"Activity_1x#body\""),
        "{xml}"
    );
    assert!(
        xml.contains("<bpmn:multiInstanceLoopCharacteristics isSequential=\"true\"/>"),
        "the sequential marker: {xml}"
    );
}

#[test]
fn an_hx_flow_is_drawn_with_an_end_event_after_each_node_that_ends_a_path() {
    let source = file("examples/payment.hx.xml");
    let p = &processes(&source)[0];
    assert!(
        !p.nodes.iter().any(|n| matches!(n.kind, NodeKind::End(_))),
        "an HX workflow has no end node"
    );
    let xml = export(p);
    let parsed = parse(&xml);
    let ends: Vec<&Option<String>> = parsed
        .elements
        .values()
        .filter(|(tag, _)| tag == "endEvent")
        .map(|(_, node)| node)
        .collect();
    // `ship` ends the only path; the compensators (run while unwinding) end none.
    assert_eq!(ends, vec![&Some("ship#end".to_string())], "{xml}");
    let ship = &parsed
        .elements
        .iter()
        .find(|(_, (_, n))| n.as_deref() == Some("ship"))
        .unwrap()
        .0;
    let end = &parsed
        .elements
        .iter()
        .find(|(_, (_, n))| n.as_deref() == Some("ship#end"))
        .unwrap()
        .0;
    assert!(parsed.shapes.contains(*end), "the end event is placed");
    assert!(
        xml.contains(&format!("sourceRef=\"{ship}\" targetRef=\"{end}\"")),
        "a flow runs from ship to its end: {xml}"
    );
    // Branches: each branch that ends gets its own end; the run model is untouched.
    let source = file("tests/fixtures/hx/valid/branches.hx.xml");
    for p in processes(&source) {
        let leaves = p
            .nodes
            .iter()
            .filter(|n| {
                n.outgoing.is_empty()
                    && !n
                        .incoming
                        .iter()
                        .any(|&f| p.flow(f).kind == FlowKind::Compensation)
            })
            .count();
        let before = (p.nodes.len(), p.flows.len());
        let xml = export(&p);
        assert_eq!(before, (p.nodes.len(), p.flows.len()));
        let parsed = parse(&xml);
        let ends = parsed
            .elements
            .values()
            .filter(|(tag, _)| tag == "endEvent")
            .count();
        assert_eq!(ends, leaves, "{xml}");
        assert!(leaves > 0);
    }
    // Other dialects keep their own ends only.
    let source = file("examples/order-flow.bpmn");
    let p = &processes(&source)[0];
    assert!(!export(p).contains("#end\""));
}
