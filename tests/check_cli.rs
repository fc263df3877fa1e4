//! `sutra check`: exit codes, human and JSON output, over the fixture corpus
//! and the MIWG reference models.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bpmn");
const MIWG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/corpora/bpmn-miwg-reference"
);

fn sutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .output()
        .expect("run sutra")
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn a_valid_file_exits_zero_with_a_summary_line() {
    let o = sutra(&["check", &fixture("valid/seed_retry.bpmn")]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("seed_retry.bpmn: ok: 1 process (1 executable), 0 errors, 0 notes"),
        "{out}"
    );
}

#[test]
fn an_invalid_file_exits_one_with_file_line_col_code_lines() {
    let path = fixture("invalid/dead_end.bpmn");
    let o = sutra(&["check", &path]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!(
            "{path}:8:5: error[SUTRA.CONFIG.BPMN.DEAD_END]: start event `Start`"
        )),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .ends_with("invalid: 1 process (1 executable), 1 error, 0 notes"),
        "{out}"
    );
}

#[test]
fn infos_are_printed_but_do_not_fail_the_check() {
    let o = sutra(&["check", &fixture("valid/foreign_extensions.bpmn")]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert_eq!(
        out.matches("info[SUTRA.CONFIG.BPMN.FOREIGN_EXTENSION_IGNORED]")
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn several_files_fail_if_any_fails_and_json_is_one_array() {
    let good = fixture("valid/timers_all_hosts.bpmn");
    let bad = fixture("invalid/retry_channel_without_timeout.bpmn");
    let o = sutra(&["check", "--format", "json", &good, &bad]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    let files = v.as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["file"], good.as_str());
    assert_eq!(files[0]["ok"], true);
    let procs = files[0]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 3);
    assert_eq!(procs[0]["id"], "TimersA");
    assert_eq!(procs[0]["executable"], true);
    assert_eq!(procs[0]["stateful"], true);
    assert_eq!(procs[0]["nodes"], 6);
    assert_eq!(files[1]["ok"], false);
    let d = &files[1]["diagnostics"][0];
    assert_eq!(d["severity"], "error");
    assert_eq!(d["code"], "SUTRA.CONFIG.BPMN.RETRY_NOT_APPLICABLE");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(12), Some(9))
    );
    assert_eq!(d["element"], "Call");
    assert!(d["message"].as_str().unwrap().contains("q:timeout"));
}

#[test]
fn json_of_a_single_valid_file_is_still_an_array() {
    let o = sutra(&[
        "check",
        "--format=json",
        &fixture("valid/not_executable.bpmn"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v = json(&o);
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["processes"][0]["executable"], false);
    assert_eq!(v[0]["diagnostics"][0]["severity"], "info");
    assert_eq!(
        v[0]["diagnostics"][0]["code"],
        "SUTRA.CONFIG.BPMN.NOT_EXECUTABLE"
    );
}

#[test]
fn an_unreadable_file_is_a_failed_check_not_a_usage_error() {
    let missing = fixture("valid/does-not-exist.bpmn");
    let o = sutra(&["check", &missing]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!(
            "{missing}: error[SUTRA.CONFIG.FILE_UNREADABLE]: cannot read"
        )),
        "{out}"
    );
    let o = sutra(&["check", "--format", "json", &missing]);
    assert_eq!(
        json(&o)[0]["diagnostics"][0]["code"],
        "SUTRA.CONFIG.FILE_UNREADABLE"
    );
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(sutra(&["check"]).status.code(), Some(2));
    assert_eq!(
        sutra(&[
            "check",
            "--format",
            "yaml",
            &fixture("valid/seed_retry.bpmn")
        ])
        .status
        .code(),
        Some(2)
    );
}

#[test]
fn every_fixture_and_miwg_model_gets_a_verdict_without_a_crash() {
    let mut all: Vec<PathBuf> = Vec::new();
    for dir in [
        format!("{FIXTURES}/valid"),
        format!("{FIXTURES}/invalid"),
        MIWG.to_string(),
    ] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "bpmn") {
                all.push(p);
            }
        }
    }
    all.sort();
    let args: Vec<&str> = std::iter::once("check")
        .chain(["--format", "json"])
        .chain(all.iter().map(|p| p.to_str().unwrap()))
        .collect();
    let o = sutra(&args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "nothing on stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&o);
    let reports = v.as_array().unwrap();
    assert_eq!(reports.len(), all.len());
    for (r, p) in reports.iter().zip(&all) {
        let expect_ok = !Path::new(p).starts_with(format!("{FIXTURES}/invalid"));
        let name = p.file_name().unwrap().to_string_lossy();
        let miwg_refused = [
            "C.1.0", "C.1.1", "C.3.0", "C.8.1", "C.9.0", "C.9.1", "C.9.2",
        ]
        .iter()
        .any(|f| name == format!("{f}.bpmn"));
        assert_eq!(r["ok"], expect_ok && !miwg_refused, "{}", p.display());
    }
}
