//! `sutra new`: starter projects a user builds on.
//!
//! - `sutra new task NAME --lang rust|python|js` writes a folder `NAME/` with
//!   the task world's WIT (`wit/task.wit`, the one the engine implements), a
//!   starter `run` (input parsing, a business error, a failure with a class),
//!   a `build.sh` that installs its own tools from the package registries
//!   (crates.io, PyPI, npm) and writes `NAME.wasm`, and a README.
//! - `sutra new flow NAME --dialect bpmn|hx|states [--task TASK]` writes one
//!   definition that calls the task `TASK` (default `greet`) with a retry and a
//!   route for its business error.
//!
//! Invariant: nothing is overwritten: an existing target is a refusal (exit 1)
//! and nothing is written. The templates are the files beside this one; the
//! tool pins are the ones `guest-examples/` builds with (checked by
//! `tests/cli_new.rs`).

use clap::{Args, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The task world every component implements (the engine's own copy).
const TASK_WIT: &str = include_str!("../../../wit/task.wit");
/// componentize-py's version, as `guest-examples/build.sh` pins it.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// componentize-js and its shim, pinned by this lock (the guest example's).
const JS_PACKAGE: &str = include_str!("../../../guest-examples/js/package.json");
const JS_LOCK: &str = include_str!("../../../guest-examples/js/package-lock.json");

#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Write a buildable task project: `NAME/` with its WIT, a starter `run` and `build.sh`.
    Task(TaskArgs),
    /// Write a starter definition that calls a task, in any of the three dialects.
    Flow(FlowArgs),
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task's name (lowercase letters, digits and `-`, starting with a letter).
    pub name: String,
    /// The language of the task.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// Where to create the project folder (default: the current directory).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct FlowArgs {
    /// The flow's name (lowercase letters, digits and `-`, starting with a letter).
    pub name: String,
    /// The dialect: BPMN with Sutra's `q:` extensions, HX (node/edge XML), or the States language (JSON).
    #[arg(long, value_enum)]
    pub dialect: Dialect,
    /// The task the flow calls (its `--task NAME=FILE` name).
    #[arg(long, default_value = "greet")]
    pub task: String,
    /// Where to write the definition (default: the current directory).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Dialect {
    Bpmn,
    Hx,
    States,
}

pub fn exec(cmd: NewCommand) -> ExitCode {
    let result = match cmd {
        NewCommand::Task(args) => new_task(&args),
        NewCommand::Flow(args) => new_flow(&args),
    };
    match result {
        Ok(message) => {
            print!("{message}");
            ExitCode::SUCCESS
        }
        Err(Refusal::Usage(m)) => super::usage_error(m),
        Err(Refusal::Refused(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(1)
        }
    }
}

enum Refusal {
    /// A malformed argument (exit 2).
    Usage(String),
    /// A target that exists or cannot be written (exit 1).
    Refused(String),
}

/// Names that are a crate name, an XML id and a file name alike.
fn check_name(what: &str, name: &str) -> Result<(), Refusal> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Refusal::Usage(format!(
            "{what} name `{name}`: use lowercase letters, digits and `-`, starting with a letter (at most 64)"
        )))
    }
}

fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out
}

fn new_task(args: &TaskArgs) -> Result<String, Refusal> {
    check_name("task", &args.name)?;
    let name = args.name.as_str();
    let crate_name = name.replace('-', "_");
    let root = args.dir.join(name);
    if root.exists() {
        return Err(Refusal::Refused(format!(
            "{} exists already: nothing was written",
            root.display()
        )));
    }
    let vars = [
        ("name", name),
        ("crate", crate_name.as_str()),
        ("componentize_py", COMPONENTIZE_PY),
    ];
    let mut files: Vec<(&str, String)> = vec![("wit/task.wit", TASK_WIT.to_string())];
    let (source, lang_word) = match args.lang {
        Lang::Rust => {
            files.push((
                "Cargo.toml",
                fill(include_str!("task_Cargo.toml.txt"), &vars),
            ));
            files.push(("src/lib.rs", fill(include_str!("task_lib.rs.txt"), &vars)));
            files.push((
                "build.sh",
                fill(include_str!("task_build_rust.sh.txt"), &vars),
            ));
            files.push((".gitignore", "/target\n*.wasm\n".to_string()));
            ("src/lib.rs", "Rust (wit-bindgen)")
        }
        Lang::Python => {
            files.push(("app.py", fill(include_str!("task_app.py.txt"), &vars)));
            files.push((
                "build.sh",
                fill(include_str!("task_build_python.sh.txt"), &vars),
            ));
            files.push((".gitignore", "/.venv\n__pycache__/\n*.wasm\n".to_string()));
            ("app.py", "Python (componentize-py)")
        }
        Lang::Js => {
            files.push(("app.js", fill(include_str!("task_app.js.txt"), &vars)));
            files.push((
                "build.sh",
                fill(include_str!("task_build_js.sh.txt"), &vars),
            ));
            files.push(("package.json", js_package(name)));
            files.push(("package-lock.json", js_lock(name)));
            files.push((".gitignore", "/node_modules\n*.wasm\n".to_string()));
            ("app.js", "JavaScript (componentize-js)")
        }
    };
    files.push(("README.md", task_readme(name, source, lang_word)));
    write_all(&root, &files)?;
    Ok(format!(
        "created {dir}/ ({lang_word} task `{name}`)\n\
         next:\n  \
         {dir}/build.sh                      # writes {dir}/{name}.wasm\n  \
         sutra task run {dir}/{name}.wasm --input '{{\"name\": \"Ada\"}}'\n  \
         sutra new flow {name}-flow --dialect bpmn --task {name}\n",
        dir = root.display()
    ))
}

/// The guest example's package.json under the project's name (same pins).
fn js_package(name: &str) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(JS_PACKAGE).expect("the embedded package.json is JSON");
    v["name"] = name.into();
    v["description"] = format!("The Sutra task `{name}` (built by ./build.sh)").into();
    serde_json::to_string_pretty(&v).expect("JSON") + "\n"
}

/// The guest example's lock under the project's name (same resolved tree).
fn js_lock(name: &str) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(JS_LOCK).expect("the embedded package-lock.json is JSON");
    v["name"] = name.into();
    v["packages"][""]["name"] = name.into();
    serde_json::to_string_pretty(&v).expect("JSON") + "\n"
}

fn task_readme(name: &str, source: &str, lang: &str) -> String {
    format!(
        "# {name}\n\n\
         A Sutra task component in {lang}: the world `task` of [`wit/task.wit`](wit/task.wit).\n\
         The starter `run` is in `{source}`: it parses its input, completes, raises a business\n\
         error, and fails with an error class (read the comment at its top).\n\n\
         ```sh\n\
         ./build.sh                                            # writes {name}.wasm\n\
         sutra task run {name}.wasm --input '{{\"name\": \"Ada\"}}'     # one attempt, printed as JSON\n\
         sutra task run {name}.wasm --input '{{\"name\": \"nobody\"}}'  # a business error (exit 1)\n\
         sutra new flow {name}-flow --dialect bpmn --task {name}\n\
         sutra run {name}-flow.bpmn --task {name}={name}.wasm --input '{{\"name\": \"Ada\"}}'\n\
         ```\n\n\
         `build.sh` installs what it needs from the package registries on its first run.\n"
    )
}

fn new_flow(args: &FlowArgs) -> Result<String, Refusal> {
    check_name("flow", &args.name)?;
    if args.task.is_empty()
        || !args
            .task
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Refusal::Usage(format!(
            "task name `{}`: use letters, digits, `-`, `_` and `.`",
            args.task
        )));
    }
    let (template, ext) = match args.dialect {
        Dialect::Bpmn => (include_str!("flow.bpmn.txt"), "bpmn"),
        Dialect::Hx => (include_str!("flow.hx.xml.txt"), "hx.xml"),
        Dialect::States => (include_str!("flow.asl.json.txt"), "asl.json"),
    };
    let file = format!("{}.{ext}", args.name);
    let path = args.dir.join(&file);
    if path.exists() {
        return Err(Refusal::Refused(format!(
            "{} exists already: nothing was written",
            path.display()
        )));
    }
    let text = fill(
        template,
        &[
            ("name", args.name.as_str()),
            ("task", args.task.as_str()),
            ("file", file.as_str()),
        ],
    );
    write_all(&args.dir, &[(file.as_str(), text)])?;
    Ok(format!(
        "created {path}\nnext:\n  sutra check {path}\n  sutra run {path} --task {task}=path/to/{task}.wasm --input '{{\"name\": \"Ada\"}}'\n",
        path = path.display(),
        task = args.task
    ))
}

/// Writes every file under `root`; build scripts are made executable.
fn write_all(root: &Path, files: &[(&str, String)]) -> Result<(), Refusal> {
    let fail = |p: &Path, e: std::io::Error| Refusal::Refused(format!("{}: {e}", p.display()));
    for (rel, text) in files {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| fail(&path, e))?;
        if rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| fail(&path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_leave_no_placeholder_unfilled() {
        let vars = [
            ("name", "n"),
            ("crate", "n"),
            ("componentize_py", "1"),
            ("task", "t"),
            ("file", "f"),
        ];
        for t in [
            include_str!("task_Cargo.toml.txt"),
            include_str!("task_lib.rs.txt"),
            include_str!("task_build_rust.sh.txt"),
            include_str!("task_app.py.txt"),
            include_str!("task_build_python.sh.txt"),
            include_str!("task_app.js.txt"),
            include_str!("task_build_js.sh.txt"),
            include_str!("flow.bpmn.txt"),
            include_str!("flow.hx.xml.txt"),
            include_str!("flow.asl.json.txt"),
        ] {
            let out = fill(t, &vars);
            assert!(!out.contains("{{"), "{out}");
        }
    }

    #[test]
    fn names_that_are_no_crate_or_xml_id_are_refused() {
        for bad in ["", "Greet", "1x", "a_b", "a b", "a-", "-a", "ä"] {
            assert!(check_name("task", bad).is_err(), "{bad}");
        }
        for good in ["greet", "a1", "send-mail"] {
            assert!(check_name("task", good).is_ok(), "{good}");
        }
    }
}
