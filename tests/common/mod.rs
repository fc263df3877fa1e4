//! Shared test helpers: the example guests (built once per test process) and
//! WAT task components (for exact traps and forbidden imports).
//!
//! Invariant: `guest` never returns a path that does not exist: it runs
//! `guest-examples/build.sh` once per process (the script is incremental) and
//! panics with the script's output if the build or the file is missing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/guests/<name>.wasm`, built by `guest-examples/build.sh` (once per
/// test process).
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = root().join("guest-examples/build.sh");
        // Straight to the terminal (the test harness captures only print
        // macros): the first run installs the guest tools, which takes minutes.
        use std::io::Write;
        let t0 = std::time::Instant::now();
        let _ = writeln!(
            std::io::stderr(),
            "guest-examples/build.sh: building the example guests (the first run installs the wasm32-wasip2 target, componentize-py and componentize-js under target/guest-tools; a few minutes) ..."
        );
        let out = std::process::Command::new("bash")
            .arg(&script)
            .current_dir(root())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let _ = writeln!(
            std::io::stderr(),
            "guest-examples/build.sh: done in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    let path = root().join("target/guests").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} was not built by guest-examples/build.sh",
        path.display()
    );
    path
}

/// The bytes of a built guest.
pub fn guest_bytes(name: &str) -> Vec<u8> {
    let path = guest(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A fake `wasi:http` package, only so a fixture can import something the
/// sandbox must refuse.
const FAKE_HTTP: &str =
    "package wasi:http@0.2.0;\ninterface outgoing-handler { handle: func(); }\n";

/// A world that is the task world plus the fake HTTP import.
const FORBIDDEN_WORLD: &str = "package test:forbidden;\n\
     world task-with-http { include sutra:task/task@0.1.0; import wasi:http/outgoing-handler@0.2.0; }\n";

/// The core module text of a WAT fixture (`tests/fixtures/wat/<name>.wat`
/// spliced into `prelude.wat`).
pub fn wat_module_text(name: &str) -> String {
    let dir = root().join("tests/fixtures/wat");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap_or_else(|e| panic!("cannot read fixture {f}: {e}"))
    };
    read("prelude.wat").replace(
        ";; @FIXTURE@ (first, so a fixture may add imports)",
        &read(&format!("{name}.wat")),
    )
}

/// A task component built from a WAT fixture against the task world (the
/// `forbidden` fixture against the task world plus a fake `wasi:http`).
pub fn wat_component(name: &str) -> Vec<u8> {
    let module =
        wat::parse_str(wat_module_text(name)).unwrap_or_else(|e| panic!("{name}.wat: {e}"));
    component_of(module, name)
}

/// A task component around a core module (`label` names it in panics; the
/// `forbidden` label builds against the task world plus a fake `wasi:http`).
pub fn component_of(mut module: Vec<u8>, label: &str) -> Vec<u8> {
    let name = label;
    let mut resolve = wit_parser::Resolve::default();
    let wit = std::fs::read_to_string(root().join("wit/task.wit")).unwrap();
    let task_pkg = resolve.push_str("task.wit", &wit).unwrap();
    let world = if name == "forbidden" {
        resolve.push_str("http.wit", FAKE_HTTP).unwrap();
        let pkg = resolve.push_str("forbidden.wit", FORBIDDEN_WORLD).unwrap();
        resolve
            .select_world(&[pkg], Some("task-with-http"))
            .unwrap()
    } else {
        resolve.select_world(&[task_pkg], Some("task")).unwrap()
    };
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

/// A plain core module (not a component).
pub fn core_module() -> Vec<u8> {
    wat::parse_str(wat_module_text("ok")).unwrap()
}
