//! The States language through the `sutra` binary: `sutra check` over the
//! asl-validator corpus (every file classified as its name says, no panic,
//! nothing on stderr).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UNSUPPORTED: &str = "SUTRA.CONFIG.STATES.UNSUPPORTED";

fn sutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .output()
        .expect("run sutra")
}

/// `../shared/corpora/asl-validator` from the project root (a clone sits
/// beside `shared/`); a worktree deeper down finds it in an ancestor.
fn corpus() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in root.ancestors().skip(1) {
        let c = dir.join("shared/corpora/asl-validator");
        if c.is_dir() {
            return c;
        }
    }
    panic!(
        "the asl-validator corpus is not at {}/../shared/corpora/asl-validator",
        root.display()
    );
}

#[test]
fn check_classifies_the_asl_validator_corpus_as_its_file_names_say() {
    let dir = corpus();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 70, "corpus has {} files", files.len());
    let mut wrong = Vec::new();
    let mut unsupported = std::collections::BTreeSet::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let o = sutra(&["check", "--format", "json", &f.display().to_string()]);
        assert!(
            o.stderr.is_empty(),
            "{name}: stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{name}: {:?}",
            o.status
        );
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let diags = report[0]["diagnostics"].as_array().unwrap().clone();
        let errors: Vec<(String, String)> = diags
            .iter()
            .filter(|d| d["severity"] == "error")
            .map(|d| {
                (
                    d["code"].as_str().unwrap().to_string(),
                    d["message"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for d in &diags {
            assert!(d["line"].as_u64().unwrap() > 0, "{name}: no position: {d}");
        }
        let ok = if name.starts_with("valid-") {
            errors.iter().all(|(c, _)| c == UNSUPPORTED)
        } else {
            errors.iter().any(|(c, _)| c != UNSUPPORTED)
        };
        if !ok {
            wrong.push(format!("{name}: {errors:?}"));
        }
        for (c, m) in &errors {
            if c == UNSUPPORTED {
                unsupported.insert(m.clone());
            }
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    // The refusals name what is not supported.
    assert!(
        unsupported.iter().all(|m| m.contains("not supported")),
        "{unsupported:#?}"
    );
}
