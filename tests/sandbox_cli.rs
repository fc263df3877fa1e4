//! `sutra task run`: exit codes and the JSON shape on stdout.

mod common;

use serde_json::Value;
use std::process::Command;

struct Run {
    code: Option<i32>,
    json: Value,
    stdout: String,
    stderr: String,
}

fn sutra(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    Run {
        code: out.status.code(),
        json,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn chaos() -> String {
    common::guest("chaos").display().to_string()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

#[test]
fn a_completed_attempt_prints_its_output_and_exits_0() {
    let r = sutra(&["task", "run", &chaos(), "--input", r#"{"do":"echo","n":1}"#]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.json,
        serde_json::json!({"outcome": "completed", "output": {"do": "echo", "n": 1}})
    );
    assert_eq!(
        r.stdout.trim().lines().count(),
        1,
        "one JSON object on one line"
    );
}

#[test]
fn a_failed_attempt_prints_code_class_retryable_message_stderr_and_exits_1() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"fail","code":"Api.Down"}"#,
        "--attempt",
        "3",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        keys(&r.json),
        ["class", "code", "message", "outcome", "retryable", "stderr"]
    );
    assert_eq!(r.json["outcome"], "failed");
    assert_eq!(r.json["code"], "Api.Down");
    assert_eq!(r.json["class"], "internal");
    assert_eq!(r.json["retryable"], true);
    assert_eq!(r.json["message"], "failure requested on attempt 3");
}

#[test]
fn a_business_error_exits_1() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"business","code":"NO"}"#,
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.json["outcome"], "business_error");
    assert_eq!(r.json["code"], "NO");
    assert_eq!(r.json["retryable"], false);
}

#[test]
fn a_trap_carries_the_guests_stderr() {
    let r = sutra(&["task", "run", &chaos(), "--input", r#"{"do":"panic"}"#]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.json["code"], "SUTRA.TASK.TRAP");
    assert!(
        r.json["stderr"]
            .as_str()
            .unwrap()
            .contains("chaos: panic requested"),
        "{}",
        r.stdout
    );
}

#[test]
fn the_memory_flag_takes_binary_units() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"alloc","bytes":1073741824}"#,
        "--memory",
        "64MiB",
    ]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.json["code"], "SUTRA.TASK.MEMORY_LIMIT");
}

#[test]
fn the_fuel_flag_limits_fuel() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"loop"}"#,
        "--fuel",
        "1000000",
    ]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.json["code"], "SUTRA.TASK.FUEL_EXHAUSTED");
}

#[test]
fn the_deadline_flag_takes_an_iso_duration() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"loop"}"#,
        "--deadline",
        "PT0.2S",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.json["code"], "SUTRA.TASK.DEADLINE_EXCEEDED");
    assert_eq!(r.json["class"], "timeout");
}

#[test]
fn a_refused_component_is_a_failed_outcome_not_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("core.wasm");
    std::fs::write(&path, common::core_module()).unwrap();
    let r = sutra(&["task", "run", path.to_str().unwrap(), "--input", "{}"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.json["code"], "SUTRA.TASK.MODULE_INVALID");
    assert_eq!(r.json["retryable"], false);
}

#[test]
fn malformed_arguments_are_usage_errors() {
    let c = chaos();
    for args in [
        vec!["task", "run", c.as_str(), "--input", "{not json"],
        vec![
            "task",
            "run",
            c.as_str(),
            "--input",
            "{}",
            "--attempt",
            "two",
        ],
        vec!["task", "run", c.as_str(), "--input", "{}", "--attempt", "0"],
        vec!["task", "run", c.as_str(), "--input", "{}", "--fuel", "-5"],
        vec![
            "task",
            "run",
            c.as_str(),
            "--input",
            "{}",
            "--memory",
            "lots",
        ],
        vec![
            "task",
            "run",
            c.as_str(),
            "--input",
            "{}",
            "--deadline",
            "5 seconds",
        ],
        vec!["task", "run", "/no/such/component.wasm", "--input", "{}"],
        vec!["task", "run", c.as_str()],
    ] {
        let r = sutra(&args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    }
}

/// A component with `extra` small functions beyond the echo fixture (as
/// tests/compile_limits.rs builds its bombs), written under `target/bench/`
/// (benches/README "Session 9" runs `sutra task run` on the same files).
fn bomb_file(extra: usize) -> std::path::PathBuf {
    let dir = common::root().join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("bomb-{extra}.wasm"));
    if !path.is_file() {
        let text = common::wat_module_text("echo");
        let head = text.trim_end().strip_suffix(')').unwrap();
        let mut wat = String::with_capacity(head.len() + extra * 96);
        wat.push_str(head);
        for i in 0..extra {
            wat.push_str(&format!(
                "(func (param i32) (result i32) local.get 0 i32.const {} i32.mul i32.const 7 i32.add local.get 0 i32.xor)\n",
                i % 100_000 + 1000
            ));
        }
        wat.push(')');
        let bytes = common::component_of(wat::parse_str(&wat).unwrap(), "bomb");
        let tmp = dir.join(format!("bomb-{extra}.wasm.{}", std::process::id()));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

fn sutra_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Run {
        code: out.status.code(),
        json: serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn a_compile_bomb_is_refused_by_the_servers_function_limit_before_compiling() {
    let bomb = bomb_file(300_000).display().to_string();
    let r = sutra(&["task", "run", &bomb, "--input", "{}"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.json["outcome"], "failed", "{}", r.stdout);
    assert_eq!(r.json["code"], "SUTRA.TASK.MODULE_INVALID");
    let message = r.json["message"].as_str().unwrap();
    assert!(
        message.contains("sutra.sandbox.compile.max-functions"),
        "{message}"
    );
}

#[test]
fn task_run_compiles_in_the_bounded_worker_under_the_servers_limits() {
    // The function count raised, the worker's address-space limit refuses
    // the bomb, as it does for a deploy (tests/compile_limits.rs).
    let bomb = bomb_file(300_000).display().to_string();
    let r = sutra_env(
        &["task", "run", &bomb, "--input", "{}"],
        &[
            ("SUTRA_SANDBOX_COMPILE_MAX_FUNCTIONS", "1000000"),
            ("SUTRA_SANDBOX_COMPILE_MEMORY", "256MiB"),
        ],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.json["code"], "SUTRA.TASK.MODULE_INVALID", "{}", r.stdout);
    let message = r.json["message"].as_str().unwrap();
    assert!(message.contains("compile memory"), "{message}");
    assert!(
        message.contains("sutra.sandbox.compile.memory"),
        "{message}"
    );
    // A limit set in the configuration file applies as well.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sutra.toml");
    std::fs::write(&config, "[sutra.sandbox.compile]\nmax-functions = 5\n").unwrap();
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        "{}",
        "--config",
        &config.display().to_string(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.json["code"], "SUTRA.TASK.MODULE_INVALID", "{}", r.stdout);
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .contains("sutra.sandbox.compile.max-functions"),
        "{}",
        r.stdout
    );
}

/// Issue 33 item 9: every verb takes `--format`, `task run` too (JSON is its default).
#[test]
fn format_json_is_accepted_and_is_the_default_shape() {
    let input = r#"{"do":"echo","n":2}"#;
    let plain = sutra(&["task", "run", &chaos(), "--input", input]);
    let json = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        input,
        "--format",
        "json",
    ]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    assert_eq!(json.json, plain.json);
    assert_eq!(json.json["output"]["n"], 2);
}

#[test]
fn format_text_renders_the_outcome_for_people() {
    let r = sutra(&[
        "task",
        "run",
        &chaos(),
        "--input",
        r#"{"do":"fail","code":"Api.Down"}"#,
        "--format",
        "text",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stdout.starts_with("outcome failed\n"), "{}", r.stdout);
    assert!(r.stdout.contains("code Api.Down"), "{}", r.stdout);
    let bad = sutra(&["task", "run", &chaos(), "--input", "{}", "--format", "yaml"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}
