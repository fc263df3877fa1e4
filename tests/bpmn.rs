//! The BPMN loader against its fixture corpus, the MIWG reference models, and
//! hostile or mangled input.
//!
//! Invalid fixtures carry their expectations in comments: `expect: CODE` is an
//! error with that code on the comment's line, at the column of the line's
//! first non-blank character; `expect: CODE at L:C` gives the position.
//! Each invalid fixture must produce exactly its expected errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use sutra::codes::Code;
use sutra::diag::Severity;
use sutra::dialect::bpmn::{self, Loaded};
use sutra::model::{
    Backoff, BoundaryTrigger, CatchTrigger, EndKind, Jitter, NodeKind, OnTimeout, Process,
    StartTrigger, TaskImpl,
};
use sutra::time::{IsoDuration, TimerSpec};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bpmn");
const MIWG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/corpora/bpmn-miwg-reference"
);

fn files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bpmn"))
        .collect();
    v.sort();
    v
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

fn load_file(p: &Path) -> Loaded {
    let loaded = bpmn::load_bytes(&std::fs::read(p).unwrap());
    for process in &loaded.definitions.processes {
        assert_invariants(process);
    }
    loaded
}

fn fixture(name: &str) -> Loaded {
    load_file(&Path::new(FIXTURES).join(name))
}

fn process<'a>(loaded: &'a Loaded, id: &str) -> &'a Process {
    loaded
        .definitions
        .processes
        .iter()
        .find(|p| p.id == id)
        .unwrap_or_else(|| panic!("no process {id}"))
}

fn kind<'a>(p: &'a Process, id: &str) -> &'a NodeKind {
    &p.find(id).unwrap_or_else(|| panic!("no node {id}")).kind
}

/// The model invariants every load must keep, whatever its diagnostics.
fn assert_invariants(p: &Process) {
    let n = p.nodes.len() as u32;
    for (i, node) in p.nodes.iter().enumerate() {
        assert_eq!(node.ix.0 as usize, i);
        if let Some(s) = node.scope {
            assert!(
                s.0 < n
                    && matches!(
                        p.node(s).kind,
                        NodeKind::SubProcess
                            | NodeKind::Fanout(_)
                            | NodeKind::EventSubProcess { .. }
                    ),
                "{}: bad scope",
                node.id
            );
        }
        for &f in &node.incoming {
            assert_eq!(p.flow(f).target, node.ix, "{}: incoming", node.id);
        }
        for &f in &node.outgoing {
            assert_eq!(p.flow(f).source, node.ix, "{}: outgoing", node.id);
        }
        for &b in &node.boundaries {
            match &p.node(b).kind {
                NodeKind::Boundary(be) => assert_eq!(be.attached_to, node.ix),
                other => panic!("{}: boundary list holds {other:?}", node.id),
            }
        }
        if let NodeKind::Boundary(be) = &node.kind {
            let host = p.node(be.attached_to);
            assert!(matches!(
                host.kind,
                NodeKind::ServiceTask(_)
                    | NodeKind::SubProcess
                    | NodeKind::Fanout(_)
                    | NodeKind::CallProcess { .. }
                    // A receive task.
                    | NodeKind::Catch(sutra::model::CatchTrigger::Message(_))
            ));
            assert_eq!(host.scope, node.scope);
            assert!(host.boundaries.contains(&node.ix));
        }
        if let NodeKind::ExclusiveGateway { default: Some(f) } = node.kind {
            assert_eq!(p.flow(f).source, node.ix);
        }
    }
    for (i, f) in p.flows.iter().enumerate() {
        assert_eq!(f.ix.0 as usize, i);
        assert!(f.source.0 < n && f.target.0 < n);
        assert!(p.node(f.source).outgoing.contains(&f.ix));
        assert!(p.node(f.target).incoming.contains(&f.ix));
        assert_eq!(
            p.node(f.source).scope,
            p.node(f.target).scope,
            "flow {} crosses scopes",
            f.id
        );
    }
}

/// `(code, line, column)` from the fixture's `expect:` comments.
fn expectations(source: &str) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let first = line.chars().take_while(|c| c.is_whitespace()).count() as u32 + 1;
        for part in line.split("expect: ").skip(1) {
            let code = part.split_whitespace().next().unwrap().to_string();
            let rest = part[code.len()..].trim_start();
            let (l, c) = match rest.strip_prefix("at ") {
                Some(pos) => {
                    let pos = pos.split_whitespace().next().unwrap();
                    let (l, c) = pos.split_once(':').unwrap();
                    (l.parse().unwrap(), c.parse().unwrap())
                }
                None => (i as u32 + 1, first),
            };
            out.push((code, l, c));
        }
    }
    out.sort();
    out
}

/// The shape of a load, for snapshots: per process, its nodes (`id: type/trigger`,
/// indented by scope) and flows (`id: source -> target [condition]`). The
/// semantic tests below check the details.
fn summary(loaded: &Loaded) -> serde_json::Value {
    let procs: Vec<serde_json::Value> = loaded
        .definitions
        .processes
        .iter()
        .map(|p| {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|n| {
                    let kind = serde_json::to_value(&n.kind).unwrap();
                    let mut tag = kind["type"].as_str().unwrap().to_string();
                    for key in ["trigger", "end"] {
                        if let Some(t) = kind.get(key).and_then(|t| t.as_str()) {
                            tag = format!("{tag}/{t}");
                        }
                    }
                    let scope = n.scope.map(|s| format!(" in {}", p.node(s).id)).unwrap_or_default();
                    format!("{}: {tag}{scope}", n.id)
                })
                .collect();
            let flows: Vec<String> = p
                .flows
                .iter()
                .map(|f| {
                    let cond = f.condition.as_ref().map(|c| format!(" [{}]", c.source())).unwrap_or_default();
                    format!("{}: {} -> {}{cond}", f.id, p.node(f.source).id, p.node(f.target).id)
                })
                .collect();
            serde_json::json!({"id": p.id, "executable": p.executable, "stateful": p.stateful(), "nodes": nodes, "flows": flows})
        })
        .collect();
    serde_json::Value::Array(procs)
}

#[test]
fn every_valid_fixture_loads_without_errors() {
    let all = files(&format!("{FIXTURES}/valid"));
    assert!(all.len() >= 10, "{all:?}");
    for path in all {
        let loaded = load_file(&path);
        let errors: Vec<String> = loaded.errors().map(|d| d.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        assert!(
            !loaded.definitions.processes.is_empty(),
            "{}",
            path.display()
        );
        insta::assert_json_snapshot!(
            format!("valid__{}", stem(&path)),
            (summary(&loaded), &loaded.diagnostics)
        );
    }
}

#[test]
fn every_invalid_fixture_reports_exactly_its_expected_errors() {
    let all = files(&format!("{FIXTURES}/invalid"));
    assert!(all.len() >= 20, "{all:?}");
    for path in all {
        let source = std::fs::read_to_string(&path).unwrap();
        let expected = expectations(&source);
        assert!(
            !expected.is_empty(),
            "{} has no expectations",
            path.display()
        );
        let loaded = load_file(&path);
        let mut got: Vec<(String, u32, u32)> = loaded
            .errors()
            .map(|d| (d.code.as_str().to_string(), d.line, d.column))
            .collect();
        got.sort();
        let listing: Vec<String> = loaded.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(got, expected, "{}:\n{listing:#?}", path.display());
        for d in loaded.errors() {
            assert!(Code::parse(d.code.as_str()).is_some());
            let whole_document = matches!(
                d.code,
                Code::XmlMalformed | Code::XmlDtdForbidden | Code::XmlLimitExceeded
            );
            assert!(
                whole_document || d.element.is_some(),
                "{}: {d} names no element",
                path.display()
            );
            assert!(
                !d.message.contains('\n'),
                "{}: multi-line message {d}",
                path.display()
            );
        }
        insta::assert_json_snapshot!(format!("invalid__{}", stem(&path)), &loaded.diagnostics);
    }
}

#[test]
fn the_seed_retry_example_becomes_one_exponential_policy() {
    let loaded = fixture("valid/seed_retry.bpmn");
    let p = process(&loaded, "Scoring");
    let NodeKind::ServiceTask(t) = kind(p, "Score") else {
        panic!()
    };
    assert_eq!(t.implementation, TaskImpl::Registered("score".into()));
    assert_eq!(t.retries.len(), 1);
    let r = &t.retries[0];
    assert_eq!(r.max_attempts, 3);
    assert_eq!(r.initial_delay, IsoDuration::from_millis(1000));
    assert_eq!(r.backoff, Backoff::Exponential { coefficient: 2.0 });
    assert_eq!(r.max_delay, Some(IsoDuration::from_millis(300_000)));
    assert_eq!(r.jitter, Jitter::None);
    assert_eq!(
        r.non_retryable_codes,
        vec!["SUTRA.TASK.VALIDATION".to_string()]
    );
    assert_eq!((r.error_equals.as_ref(), r.retry_on.as_ref()), (None, None));
    assert!(t.timeout.is_none());
    // "waits 1 s, then 2 s" between its attempts.
    assert_eq!(r.delay(2, 0.9).as_millis(), 1000);
    assert_eq!(r.delay(3, 0.9).as_millis(), 2000);
    assert!(p.stateful(), "a retry policy makes the process stateful");
}

#[test]
fn a_channel_call_keeps_its_timeout_io_and_retry_knobs() {
    let loaded = fixture("valid/channel_call_retry.bpmn");
    let p = process(&loaded, "Payment");
    let NodeKind::ServiceTask(t) = kind(p, "Charge") else {
        panic!()
    };
    assert_eq!(t.implementation, TaskImpl::Channel("payments".into()));
    let r = &t.retries[0];
    assert_eq!((r.max_attempts, r.jitter), (4, Jitter::Full));
    assert_eq!(r.backoff, Backoff::Exponential { coefficient: 3.0 });
    assert_eq!(r.initial_delay, IsoDuration::from_millis(2000));
    assert_eq!(r.max_delay, None);
    assert_eq!(
        r.non_retryable_codes,
        vec![
            "SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED",
            "Card.Declined"
        ]
    );
    let timeout = t.timeout.as_ref().unwrap();
    assert_eq!(
        (timeout.duration, timeout.on_timeout),
        (IsoDuration::from_millis(30_000), OnTimeout::Retry)
    );
    assert_eq!(t.io.input_path.as_deref(), Some("$.order"));
    assert_eq!(t.io.result_path.as_deref(), Some("$.charge"));
    let NodeKind::Boundary(b) = kind(p, "Reminder") else {
        panic!()
    };
    assert!(!b.interrupting);
    assert_eq!(p.node(b.attached_to).id, "Charge");
    assert!(p.stateful());
}

#[test]
fn every_timer_kind_loads_on_every_host() {
    let loaded = fixture("valid/timers_all_hosts.bpmn");
    let tag = |t: &TimerSpec| match t {
        TimerSpec::Duration(_) => "duration",
        TimerSpec::Date(_) => "date",
        TimerSpec::Cycle(_) => "cycle",
    };
    let mut seen = BTreeMap::new();
    for p in &loaded.definitions.processes {
        for n in &p.nodes {
            let (host, timer) = match &n.kind {
                NodeKind::Start(StartTrigger::Timer(t)) => ("start", t),
                NodeKind::Catch(CatchTrigger::Timer(t)) => ("catch", t),
                NodeKind::Boundary(b) => match &b.trigger {
                    BoundaryTrigger::Timer(t) => ("boundary", t),
                    _ => continue,
                },
                _ => continue,
            };
            seen.insert((host, tag(timer)), n.id.clone());
        }
    }
    assert_eq!(seen.len(), 9, "{seen:?}");
    let p = process(&loaded, "TimersA");
    assert!(
        matches!(kind(p, "A_Start"), NodeKind::Start(StartTrigger::Timer(TimerSpec::Duration(d))) if *d == IsoDuration::from_millis(900_000))
    );
    let NodeKind::Boundary(b) = kind(process(&loaded, "TimersA"), "A_Tick") else {
        panic!()
    };
    let BoundaryTrigger::Timer(TimerSpec::Cycle(c)) = &b.trigger else {
        panic!()
    };
    assert_eq!(
        (c.repetitions, c.interval),
        (Some(3), IsoDuration::from_millis(600_000))
    );
}

#[test]
fn any_bpmn_prefix_or_the_default_namespace_loads_the_same_process() {
    let shape = |name: &str| {
        let loaded = fixture(name);
        assert!(loaded.ok(), "{name}: {:?}", loaded.diagnostics);
        let p = process(&loaded, "Orders").clone();
        let nodes: Vec<String> = p
            .nodes
            .iter()
            .map(|n| format!("{} {}", n.id, serde_json::to_string(&n.kind).unwrap()))
            .collect();
        let flows: Vec<String> = p
            .flows
            .iter()
            .map(|f| {
                format!(
                    "{} {}->{} {:?}",
                    f.id,
                    p.node(f.source).id,
                    p.node(f.target).id,
                    f.condition.as_ref().map(|c| c.source().to_string())
                )
            })
            .collect();
        (nodes, flows)
    };
    let bpmn2 = shape("valid/prefix_bpmn2.bpmn");
    assert_eq!(bpmn2, shape("valid/prefix_semantic.bpmn"));
    assert_eq!(bpmn2, shape("valid/default_namespace.bpmn"));
    let loaded = fixture("valid/prefix_bpmn2.bpmn");
    let p = process(&loaded, "Orders");
    let NodeKind::ExclusiveGateway { default: Some(d) } = kind(p, "Amount") else {
        panic!()
    };
    assert_eq!(p.flow(*d).id, "F_Small");
    let big = p.flows.iter().find(|f| f.id == "F_Big").unwrap();
    let vars = serde_json::json!({"amount": 2000, "customer": {"tier": "silver"}});
    assert!(big
        .condition
        .as_ref()
        .unwrap()
        .eval_bool(vars.as_object().unwrap())
        .unwrap());
    assert!(matches!(kind(p, "Done"), NodeKind::Pass { set: None }));
    assert!(matches!(kind(p, "Join"), NodeKind::ParallelGateway));
}

#[test]
fn sub_processes_scope_their_children_and_boundaries_attach() {
    let loaded = fixture("valid/subprocess_errors.bpmn");
    let p = process(&loaded, "Fulfilment");
    let sub = p.find("Pick").unwrap().ix;
    for id in ["Pick_Start", "Reserve", "InStock", "Pick_End", "Pick_Empty"] {
        assert_eq!(p.find(id).unwrap().scope, Some(sub), "{id}");
    }
    assert_eq!(p.find("NoStock").unwrap().scope, None);
    assert!(
        matches!(kind(p, "Pick_Empty"), NodeKind::End(EndKind::Error { code, message }) if code == "Stock.Empty" && message.as_deref() == Some("Out of stock"))
    );
    assert!(matches!(
        kind(p, "Abort"),
        NodeKind::End(EndKind::Terminate)
    ));
    let NodeKind::Boundary(no_stock) = kind(p, "NoStock") else {
        panic!()
    };
    assert!(
        matches!(&no_stock.trigger, BoundaryTrigger::Error { codes: Some(c), catch_failures: false, .. } if c == &["Stock.Empty"])
    );
    let NodeKind::Boundary(any) = kind(p, "ShipFailed") else {
        panic!()
    };
    assert!(matches!(
        &any.trigger,
        BoundaryTrigger::Error { codes: None, .. }
    ));
    let NodeKind::Boundary(cancel) = kind(p, "CancelAsked") else {
        panic!()
    };
    assert!(!cancel.interrupting);
    let BoundaryTrigger::Message(m) = &cancel.trigger else {
        panic!()
    };
    assert_eq!(m.name, "order-cancelled");
    assert_eq!(m.correlation_key.as_ref().unwrap().source(), "orderId");
    let boundaries: Vec<&str> = p
        .find("Pick")
        .unwrap()
        .boundaries
        .iter()
        .map(|&b| p.node(b).id.as_str())
        .collect();
    assert_eq!(boundaries, vec!["NoStock", "CancelAsked"]);
}

#[test]
fn message_and_source_starts_and_correlated_catches() {
    let loaded = fixture("valid/messages_and_sources.bpmn");
    let p = process(&loaded, "ByMessage");
    assert!(
        matches!(kind(p, "M_Start"), NodeKind::Start(StartTrigger::Message { name }) if name == "order-placed")
    );
    let NodeKind::Catch(CatchTrigger::Message(m)) = kind(p, "M_Paid") else {
        panic!()
    };
    assert_eq!(
        (
            m.name.as_str(),
            m.correlation_key.as_ref().map(|k| k.source())
        ),
        ("order-paid", Some("order.id"))
    );
    let q = process(&loaded, "BySource");
    assert!(
        matches!(kind(q, "S_Start"), NodeKind::Start(StartTrigger::Source { name }) if name == "orders-http")
    );
    assert!(
        !q.stateful(),
        "a source start with a registered task runs to completion"
    );
}

#[test]
fn foreign_extensions_are_infos_naming_what_is_ignored() {
    let loaded = fixture("valid/foreign_extensions.bpmn");
    assert!(loaded.ok());
    let infos: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::BpmnForeignExtension)
        .collect();
    assert_eq!(infos.len(), 2, "{infos:?}");
    assert!(infos.iter().all(|d| d.severity == Severity::Info));
    let work = infos
        .iter()
        .find(|d| d.element.as_deref() == Some("Work"))
        .unwrap();
    assert!(
        work.message.contains("camunda:asyncBefore")
            && work.message.contains("zeebe:taskDefinition"),
        "{}",
        work.message
    );
    assert_eq!(
        process(&loaded, "Foreign").nodes.len(),
        3,
        "lanes, data and annotations are not nodes"
    );
}

#[test]
fn non_executable_processes_load_for_inspection_with_one_info_each() {
    let loaded = fixture("valid/not_executable.bpmn");
    assert!(loaded.ok());
    let codes: Vec<(Code, Option<&str>)> = loaded
        .diagnostics
        .iter()
        .map(|d| (d.code, d.element.as_deref()))
        .collect();
    assert_eq!(
        codes,
        vec![
            (Code::BpmnNotExecutable, Some("Sketch")),
            (Code::BpmnNotExecutable, Some("NoFlag"))
        ]
    );
    let sketch = process(&loaded, "Sketch");
    assert!(!sketch.executable);
    // The user task and the inclusive gateway stand in the graph as placeholders.
    assert_eq!(sketch.nodes.len(), 3);
    assert_eq!(sketch.flows.len(), 2);
    assert!(
        !process(&loaded, "NoFlag").executable,
        "isExecutable absent means not executable"
    );
}

#[test]
fn marking_a_process_executable_turns_its_unsupported_elements_into_errors() {
    let source = std::fs::read_to_string(format!("{FIXTURES}/valid/not_executable.bpmn")).unwrap();
    let loaded = bpmn::load(&source.replace("isExecutable=\"false\"", "isExecutable=\"true\""));
    let unsupported: Vec<&str> = loaded
        .errors()
        .filter(|d| d.code == Code::BpmnUnsupportedElement)
        .map(|d| d.element.as_deref().unwrap())
        .collect();
    assert_eq!(unsupported, vec!["Approve", "Or"]);
    // The placeholders are not reported again (no dead end, no stuck gateway).
    assert_eq!(loaded.errors().count(), 2, "{:#?}", loaded.diagnostics);
}

#[test]
fn the_miwg_reference_models_load_without_panic_and_every_refusal_names_its_element() {
    let all = files(MIWG);
    assert_eq!(all.len(), 21, "{all:?}");
    let mut verdicts = BTreeMap::new();
    for path in &all {
        let loaded = load_file(path);
        for d in loaded.errors() {
            assert!(d.element.is_some() && d.line > 0, "{}: {d}", path.display());
            assert!(!d.message.contains('\n'), "{}: {d}", path.display());
            if d.code == Code::BpmnUnsupportedElement {
                assert!(d.message.contains(d.element.as_deref().unwrap()), "{d}");
            }
        }
        assert!(
            !loaded.definitions.processes.is_empty(),
            "{}",
            path.display()
        );
        verdicts.insert(stem(path), loaded.ok());
    }
    // The ones that fail hold executable processes with user tasks, send tasks,
    // event sub-processes, FEEL or XPath conditions, or tool-specific implementations.
    let refused: Vec<&str> = verdicts
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(
        refused,
        vec!["C.1.0", "C.1.1", "C.3.0", "C.8.1", "C.9.0", "C.9.1", "C.9.2"]
    );
}

#[test]
fn copied_miwg_models_marked_executable_load_as_the_supported_subset() {
    for name in [
        "miwg_A.1.0_executable",
        "miwg_A.2.0_executable",
        "miwg_A.4.0_executable",
    ] {
        let loaded = fixture(&format!("valid/{name}.bpmn"));
        assert!(loaded.ok(), "{name}: {:#?}", loaded.diagnostics);
        assert!(loaded
            .definitions
            .processes
            .iter()
            .all(|p| p.executable && !p.registered_tasks().is_empty()));
    }
}

fn codes(loaded: &Loaded) -> Vec<Code> {
    loaded.diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn hostile_documents_are_refused_within_the_limits() {
    let defs = |inner: &str| {
        format!(
            r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"><process id="P">{inner}</process></definitions>"#
        )
    };
    let huge_attribute = defs(&format!(
        r#"<task id="T" name="{}"/>"#,
        "x".repeat(70 * 1024)
    ));
    assert_eq!(
        codes(&bpmn::load(&huge_attribute)),
        vec![Code::XmlLimitExceeded]
    );
    let huge_text = defs(&format!(
        "<documentation>{}</documentation>",
        "y".repeat(70 * 1024)
    ));
    assert_eq!(codes(&bpmn::load(&huge_text)), vec![Code::XmlLimitExceeded]);
    let many = defs(&"<task/>".repeat(100_001));
    assert_eq!(codes(&bpmn::load(&many)), vec![Code::XmlLimitExceeded]);
    let oversized = " ".repeat(16 * 1024 * 1024 + 1);
    assert_eq!(codes(&bpmn::load(&oversized)), vec![Code::XmlLimitExceeded]);
    assert_eq!(
        codes(&bpmn::load_bytes(oversized.as_bytes())),
        vec![Code::XmlLimitExceeded]
    );
    let undeclared = defs(r#"<task id="T" name="&lol9;"/>"#);
    assert_eq!(codes(&bpmn::load(&undeclared)), vec![Code::XmlMalformed]);
    let prefixes = |r: std::ops::Range<u32>| {
        r.map(|i| format!(" xmlns:p{i}=\"urn:{i}\""))
            .collect::<String>()
    };
    let nested = format!("<a{}><b{}/></a>", prefixes(0..150), prefixes(150..300));
    assert_eq!(codes(&bpmn::load(&nested)), vec![Code::XmlLimitExceeded]);
}

#[test]
fn a_non_bpmn_or_non_text_document_is_refused_with_a_code() {
    assert_eq!(
        codes(&bpmn::load(r#"{"StartAt": "x"}"#)),
        vec![Code::XmlMalformed]
    );
    assert_eq!(
        codes(&bpmn::load("<workflow xmlns='urn:hx'/>")),
        vec![Code::BpmnNotDefinitions]
    );
    assert_eq!(
        codes(&bpmn::load_bytes(b"<a>\xff\xfe</a>")),
        vec![Code::XmlMalformed]
    );
    // ISO-8859-1, as the MIWG files declare, is decoded.
    let latin1 = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<definitions xmlns=\"http://www.omg.org/spec/BPMN/20100524/MODEL\"><process id=\"P\" name=\"Caf\xe9\"/></definitions>";
    let loaded = bpmn::load_bytes(latin1);
    assert_eq!(
        loaded.definitions.processes[0].name.as_deref(),
        Some("Café")
    );
}

mod mangled {
    //! Mangled versions of valid fixtures: the loader must neither panic nor
    //! break the IR invariants, whatever it reports.
    use super::*;
    use proptest::prelude::*;

    fn sources() -> Vec<String> {
        files(&format!("{FIXTURES}/valid"))
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    }

    fn check(text: &str) {
        let loaded = bpmn::load(text);
        for p in &loaded.definitions.processes {
            assert_invariants(p);
        }
        let _ = loaded.ok();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn cutting_a_span_never_panics(file in 0usize..14, at in 0usize..10_000, len in 1usize..400) {
            let all = sources();
            let s = &all[file % all.len()];
            let at = at % s.len();
            let end = (at + len).min(s.len());
            if s.is_char_boundary(at) && s.is_char_boundary(end) {
                check(&format!("{}{}", &s[..at], &s[end..]));
            }
        }

        #[test]
        fn repeating_or_rewiring_never_panics(file in 0usize..14, a in 0usize..10_000, b in 0usize..10_000, id in "[A-Za-z_]{1,8}") {
            let all = sources();
            let s = &all[file % all.len()];
            let (a, b) = ((a % s.len()).min(b % s.len()), (a % s.len()).max(b % s.len()));
            if s.is_char_boundary(a) && s.is_char_boundary(b) {
                check(&format!("{}{}{}", &s[..b], &s[a..b], &s[b..]));
            }
            // Point a reference somewhere else.
            check(&s.replacen("targetRef=\"", &format!("targetRef=\"{id}"), 1 + a % 3));
            check(&s.replacen("attachedToRef=\"", "attachedToRef=\"F1", 1));
        }
    }
}

#[test]
fn an_activity_default_flow_carries_the_negation_of_its_siblings_conditions() {
    let loaded = fixture("valid/conditional_flows.bpmn");
    let p = process(&loaded, "P");
    let cond = |id: &str| {
        p.flows
            .iter()
            .find(|f| f.id == id)
            .and_then(|f| f.condition.as_ref())
            .map(|c| c.source().to_string())
    };
    assert_eq!(cond("IfBig").as_deref(), Some("amount > 100"));
    assert_eq!(
        cond("Otherwise").as_deref(),
        Some("!((amount > 100) || (tier == 'gold'))")
    );
}

#[test]
fn implicit_starts_are_synthetic_none_starts_to_every_entry_node() {
    let loaded = fixture("valid/implicit_start_and_end.bpmn");
    let p = process(&loaded, "P");
    let start = p
        .find("P#implicit-start")
        .expect("process-level implicit start");
    assert!(start.scope.is_none());
    assert!(matches!(start.kind, NodeKind::Start(StartTrigger::None)));
    let mut targets: Vec<&str> = start
        .outgoing
        .iter()
        .map(|&f| p.node(p.flow(f).target).id.as_str())
        .collect();
    targets.sort();
    // A (no incoming flow) and B (none either); Handled follows a boundary.
    assert_eq!(targets, vec!["A", "B"]);
    let sub = p
        .find("Sub#implicit-start")
        .expect("sub-process implicit start");
    assert_eq!(sub.scope, Some(p.find("Sub").unwrap().ix));
    assert_eq!(p.node(p.flow(sub.outgoing[0]).target).id, "Inner");
    // The error end without errorRef throws the unnamed error.
    match &p.find("Fail").unwrap().kind {
        NodeKind::End(EndKind::Error { code, .. }) => {
            assert_eq!(code, Code::BpmnUnnamedError.as_str())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_q_timeout_on_a_registered_task_without_retry_is_a_bpmn_error_and_with_retry_a_failed_attempt()
{
    let doc = |retry: &str| {
        format!(
            r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="https://sutra.dev/bpmn/q/1.0">
  <process id="P" isExecutable="true">
    <startEvent id="S"/>
    <serviceTask id="T" implementation="registered:t"><extensionElements><q:timeout duration="PT2S"/>{retry}</extensionElements></serviceTask>
    <sequenceFlow id="F" sourceRef="S" targetRef="T"/>
  </process>
</definitions>"#
        )
    };
    for (retry, want) in [
        ("", OnTimeout::Error),
        (r#"<q:retry maxAttempts="3"/>"#, OnTimeout::Retry),
    ] {
        let loaded = bpmn::load(&doc(retry));
        assert!(loaded.ok(), "{:#?}", loaded.diagnostics);
        match kind(process(&loaded, "P"), "T") {
            NodeKind::ServiceTask(t) => assert_eq!(t.timeout.as_ref().unwrap().on_timeout, want),
            other => panic!("{other:?}"),
        }
    }
}
