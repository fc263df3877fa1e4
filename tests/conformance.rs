//! The two execution oracles written by others, run through the `sutra` binary
//! as a user runs it: the States-language executions recorded on AWS Step
//! Functions (`tests/corpora/asl-conformance/`, its `run.sh`) and the betsy BPMN
//! conformance suite (`tests/corpora/bpmn-conformance/`, its `runner.py`), each
//! the public half of a larger suite.
//!
//! Every case's verdict is compared with the list of expected divergences kept
//! beside the corpus (`EXPECTED.tsv`: `NAME<TAB>VERDICT<TAB>REASON`, `#`
//! comments). The test fails when a case does not pass and is not listed with
//! that verdict (a regression, or a model accepted that then runs wrongly), and
//! when a listed case now passes or is listed with another verdict (the list
//! must say what is true, so it shrinks as the constructs land). Every entry's
//! reason names a seed's decision or the issue that will implement it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus(name: &str) -> PathBuf {
    common::root().join("tests/corpora").join(name)
}

/// `EXPECTED.tsv`: case name → (verdict, reason).
fn expected(dir: &Path) -> BTreeMap<String, (String, String)> {
    let path = dir.join("EXPECTED.tsv");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.splitn(3, '\t');
        let (Some(name), Some(verdict), Some(reason)) = (cols.next(), cols.next(), cols.next())
        else {
            panic!(
                "{}:{}: want NAME<TAB>VERDICT<TAB>REASON, got {line:?}",
                path.display(),
                n + 1
            );
        };
        assert!(
            !reason.trim().is_empty(),
            "{}:{}: {name} has no reason",
            path.display(),
            n + 1
        );
        let old = out.insert(name.to_string(), (verdict.to_string(), reason.to_string()));
        assert!(old.is_none(), "{}: {name} is listed twice", path.display());
    }
    out
}

/// Compares the verdicts (case → (verdict, detail)) with the expected list and
/// panics with every difference at once.
fn judge(suite: &str, dir: &Path, verdicts: &BTreeMap<String, (String, String)>, transcript: &str) {
    let expected = expected(dir);
    assert!(
        verdicts.len() >= 40,
        "{suite}: only {} cases ran:\n{transcript}",
        verdicts.len()
    );
    let mut wrong = Vec::new();
    for (name, (verdict, detail)) in verdicts {
        match (verdict.as_str(), expected.get(name)) {
            ("PASS", None) => {}
            ("PASS", Some((want, _))) => wrong.push(format!(
                "{name}: now passes, but EXPECTED.tsv lists it as {want}: remove the line"
            )),
            (got, None) => wrong.push(format!("{name}: {got} and not listed: {detail}")),
            (got, Some((want, _))) if got != want => wrong.push(format!(
                "{name}: {got}, but EXPECTED.tsv lists it as {want}: {detail}"
            )),
            _ => {}
        }
    }
    for name in expected.keys() {
        if !verdicts.contains_key(name) {
            wrong.push(format!(
                "{name}: listed in EXPECTED.tsv but not in the corpus"
            ));
        }
    }
    let pass = verdicts.values().filter(|(v, _)| v == "PASS").count();
    eprintln!("{suite}: {pass}/{} pass", verdicts.len());
    assert!(
        wrong.is_empty(),
        "{suite}: {} difference(s) from {}/EXPECTED.tsv:\n  {}",
        wrong.len(),
        dir.display(),
        wrong.join("\n  ")
    );
}

#[test]
fn asl_conformance_matches_the_recorded_aws_outcomes_but_for_the_listed_divergences() {
    let dir = corpus("asl-conformance");
    let out = Command::new("bash")
        .arg(dir.join("run.sh"))
        .arg(env!("CARGO_BIN_EXE_sutra"))
        .env("ASL_CONFORMANCE_TIMEOUT", "120")
        .output()
        .expect("run asl-conformance/run.sh (bash and python3 are needed)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "run.sh broke ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut verdicts = BTreeMap::new();
    for line in text.lines() {
        let mut cols = line.splitn(3, '\t');
        if let (Some(verdict), Some(name)) = (cols.next(), cols.next()) {
            let detail = cols.next().unwrap_or("").to_string();
            verdicts.insert(name.to_string(), (verdict.to_string(), detail));
        }
    }
    judge("asl-conformance", &dir, &verdicts, &text);
}

#[test]
fn bpmn_conformance_has_no_case_that_runs_wrongly_and_refuses_only_the_listed_ones() {
    let dir = corpus("bpmn-conformance");
    let chaos = common::guest("chaos");
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("python3")
        .arg(dir.join("runner.py"))
        .arg(env!("CARGO_BIN_EXE_sutra"))
        .arg(&chaos)
        .env("BPMN_CONFORMANCE_JSON", report.path())
        .output()
        .expect("run bpmn-conformance/runner.py (python3 is needed)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "runner.py broke ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(report.path()).unwrap())
        .unwrap_or_else(|e| {
            panic!("runner.py wrote no JSON report ({e}):\n{text}");
        });
    let mut verdicts = BTreeMap::new();
    for r in results.as_array().expect("a list of verdicts") {
        let name = r["name"].as_str().expect("a case name").to_string();
        let verdict = r["verdict"].as_str().expect("a verdict").to_string();
        let kinds: Vec<&str> = r["refusals"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["kind"].as_str())
            .collect();
        let detail = if kinds.is_empty() {
            r["head"].as_str().unwrap_or("").to_string()
        } else {
            format!("refused: {}", kinds.join(", "))
        };
        verdicts.insert(name, (verdict, detail));
    }
    judge("bpmn-conformance", &dir, &verdicts, &text);
}
