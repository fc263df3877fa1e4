//! `sutra new`: every scaffold builds with its own `build.sh` and runs, as the
//! README's "Writing a task" walks through: `sutra new task`, `./build.sh`,
//! `sutra task run`, `sutra new flow` in each dialect, `sutra run`.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sutra(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run sutra")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// `sutra new task NAME --lang LANG` in `dir`, then its `build.sh`: the component.
fn scaffold_and_build(dir: &Path, name: &str, lang: &str) -> PathBuf {
    let made = sutra(dir, &["new", "task", name, "--lang", lang]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let project = dir.join(name);
    for f in ["wit/task.wit", "build.sh", "README.md"] {
        assert!(project.join(f).is_file(), "{lang}: no {f}");
    }
    let mut build = Command::new("bash");
    build.arg(project.join("build.sh"));
    // The Rust scaffold's dependencies are built once per checkout.
    build.env(
        "CARGO_TARGET_DIR",
        common::root().join("target/scaffold-build"),
    );
    let out = build.output().expect("run build.sh");
    assert!(out.status.success(), "{lang} build.sh: {}", text(&out));
    let wasm = project.join(format!("{name}.wasm"));
    assert!(
        wasm.is_file(),
        "{lang}: build.sh wrote no {}",
        wasm.display()
    );
    wasm
}

/// The starter task's three outcomes through `sutra task run`.
fn check_task_outcomes(dir: &Path, wasm: &Path) {
    let w = wasm.to_str().unwrap();
    let ok = sutra(dir, &["task", "run", w, "--input", r#"{"name": "Ada"}"#]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let v = json(&ok);
    assert_eq!(v["outcome"], "completed", "{v}");
    assert_eq!(v["output"]["greeting"], "Hello, Ada!", "{v}");
    // A cold compile says what it is doing (stderr; stdout is the one JSON object).
    assert!(
        String::from_utf8_lossy(&ok.stderr).contains("compiling"),
        "{}",
        text(&ok)
    );

    let business = sutra(dir, &["task", "run", w, "--input", r#"{"name": "nobody"}"#]);
    assert_eq!(business.status.code(), Some(1), "{}", text(&business));
    let v = json(&business);
    assert_eq!(v["outcome"], "business_error", "{v}");
    assert_eq!(v["code"], "GREETING.UNKNOWN_PERSON", "{v}");

    let busy = sutra(
        dir,
        &[
            "task",
            "run",
            w,
            "--input",
            r#"{"name": "Ada", "busy": true}"#,
        ],
    );
    let v = json(&busy);
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(v["code"], "GREETING.BUSY", "{v}");
    assert_eq!(v["class"], "transient", "{v}");
    assert_eq!(v["retryable"], true, "{v}");
    let second = sutra(
        dir,
        &[
            "task",
            "run",
            w,
            "--attempt",
            "2",
            "--input",
            r#"{"name": "Ada", "busy": true}"#,
        ],
    );
    assert_eq!(json(&second)["outcome"], "completed", "{}", text(&second));

    let bad = sutra(dir, &["task", "run", w, "--input", r#"{"name": 7}"#]);
    let v = json(&bad);
    assert_eq!(v["code"], "SUTRA.TASK.VALIDATION", "{v}");
    assert_eq!(v["class"], "invalid_input", "{v}");
    assert_eq!(v["retryable"], false, "{v}");
}

#[test]
fn a_rust_task_scaffold_builds_runs_and_serves_a_flow_in_each_dialect() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let wasm = scaffold_and_build(dir, "greet", "rust");
    check_task_outcomes(dir, &wasm);
    let task = format!("greet={}", wasm.display());
    for (dialect, file, result) in [
        ("bpmn", "hello.bpmn", "/result/greeting"),
        ("hx", "hello.hx.xml", "/greeting"),
        ("states", "hello.asl.json", "/result/greeting"),
    ] {
        let made = sutra(dir, &["new", "flow", "hello", "--dialect", dialect]);
        assert_eq!(made.status.code(), Some(0), "{}", text(&made));
        let checked = sutra(dir, &["check", file]);
        assert_eq!(
            checked.status.code(),
            Some(0),
            "{dialect}: {}",
            text(&checked)
        );
        // A transient failure on the first attempt: retried with backoff, then done.
        let run = sutra(
            dir,
            &[
                "run",
                file,
                "--task",
                &task,
                "--input",
                r#"{"name": "Ada", "busy": true}"#,
                "--virtual-clock",
                "--format",
                "json",
            ],
        );
        assert_eq!(run.status.code(), Some(0), "{dialect}: {}", text(&run));
        let v = json(&run);
        assert_eq!(v["state"], "COMPLETED", "{dialect}: {v}");
        assert_eq!(
            v["variables"].pointer(result),
            Some(&Value::from("Hello, Ada!")),
            "{dialect}: {v}"
        );
        let attempts = v["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{dialect}: one retry: {v}");
        // A second `new` of the same name writes nothing.
        let again = sutra(dir, &["new", "flow", "hello", "--dialect", dialect]);
        assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    }
    // The business error is routed (BPMN boundary, States Catch): the flow completes.
    for file in ["hello.bpmn", "hello.asl.json"] {
        let run = sutra(
            dir,
            &[
                "run",
                file,
                "--task",
                &task,
                "--input",
                r#"{"name": "nobody"}"#,
                "--virtual-clock",
                "--format",
                "json",
            ],
        );
        let v = json(&run);
        assert_eq!(v["state"], "COMPLETED", "{file}: {v}");
    }
}

#[test]
fn a_python_task_scaffold_builds_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = scaffold_and_build(tmp.path(), "greet-py", "python");
    check_task_outcomes(tmp.path(), &wasm);
}

#[test]
fn a_javascript_task_scaffold_builds_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = scaffold_and_build(tmp.path(), "greet-js", "js");
    check_task_outcomes(tmp.path(), &wasm);
}

#[test]
fn the_scaffolds_pin_the_tools_the_guest_examples_build_with() {
    let script = std::fs::read_to_string(common::root().join("guest-examples/build.sh")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let made = sutra(tmp.path(), &["new", "task", "p", "--lang", "python"]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let build = std::fs::read_to_string(tmp.path().join("p/build.sh")).unwrap();
    let pin = script
        .lines()
        .find_map(|l| l.strip_prefix("COMPONENTIZE_PY_VERSION=\""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("build.sh pins componentize-py");
    assert!(
        build.contains(&format!("componentize-py=={pin}")),
        "{build}"
    );
    let made = sutra(tmp.path(), &["new", "task", "j", "--lang", "js"]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("j/package-lock.json")).unwrap(),
    )
    .unwrap();
    let ours: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("guest-examples/js/package-lock.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        lock["packages"][""]["devDependencies"],
        ours["packages"][""]["devDependencies"]
    );
    assert_eq!(lock["name"], "j");
    // Names that are no crate name or XML id are a usage error; nothing is written.
    let bad = sutra(tmp.path(), &["new", "task", "Bad Name", "--lang", "rust"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(!tmp.path().join("Bad Name").exists());
}
