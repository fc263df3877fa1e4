//! `sutra check <file>... [--format text|json]` (`human` is an alias of `text`): load definition files and
//! report their diagnostics.
//!
//! Exit status: 0 when every file is valid (infos allowed), 1 when any file
//! has an error diagnostic or cannot be read (`SUTRA.CONFIG.FILE_UNREADABLE`),
//! 2 for a usage error (clap's, e.g. no file given).
//!
//! Every file goes through `dialect::load`, which picks the loader by content
//! (BPMN, HX or States language; see `dialect`).
//!
//! Text output: one `file:line:col: severity[CODE]: message` line per
//! diagnostic (`file: severity[...]` when there is no position), then one
//! summary line per file. JSON output: one array with one object per file:
//! `{"file", "ok", "processes": [{"id", "executable", "stateful", "nodes"}],
//! "diagnostics": [{"severity", "code", "message", "line", "column", "element"}]}`.

use super::run::Format;
use crate::codes::Code;
use crate::diag::{Diagnostic, Severity};
use crate::dialect;
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Definition files (BPMN or HX XML, States-language JSON).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output: `text` (one line per diagnostic, then a summary per file; `human` is an alias)
    /// or `json`.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// What `check` reports for one file.
#[derive(Debug, Serialize)]
pub struct FileReport {
    pub file: String,
    pub ok: bool,
    pub processes: Vec<ProcessSummary>,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Serialize)]
pub struct ProcessSummary {
    pub id: String,
    pub executable: bool,
    pub stateful: bool,
    pub nodes: usize,
}

/// Check one file (the work behind `sutra check`, without printing).
pub fn check_file(path: &std::path::Path) -> FileReport {
    let file = path.display().to_string();
    let loaded = match std::fs::read(path) {
        Ok(bytes) => dialect::load_bytes(&bytes),
        Err(e) => {
            let d = Diagnostic::error(Code::FileUnreadable, format!("cannot read {file}: {e}"));
            return FileReport {
                file,
                ok: false,
                processes: Vec::new(),
                diagnostics: vec![d],
            };
        }
    };
    let processes = loaded
        .definitions
        .processes
        .iter()
        .map(|p| ProcessSummary {
            id: p.id.clone(),
            executable: p.executable,
            stateful: p.stateful(),
            nodes: p.nodes.len(),
        })
        .collect();
    FileReport {
        file,
        ok: loaded.ok(),
        processes,
        diagnostics: loaded.diagnostics,
    }
}

pub fn exec(args: CheckArgs) -> ExitCode {
    let reports: Vec<FileReport> = args.files.iter().map(|f| check_file(f)).collect();
    let all_ok = reports.iter().all(|r| r.ok);
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        Format::Json => serde_json::to_writer_pretty(&mut out, &reports)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        Format::Text => reports.iter().try_for_each(|r| write_human(&mut out, r)),
    };
    if let Err(e) = written {
        // A closed pipe is not worth a panic; say it and fail.
        eprintln!("error: cannot write the report: {e}");
        return ExitCode::from(1);
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The human rendering of one file's report.
pub fn write_human(out: &mut impl Write, r: &FileReport) -> std::io::Result<()> {
    for d in &r.diagnostics {
        if d.line == 0 {
            writeln!(
                out,
                "{}: {}[{}]: {}",
                r.file,
                d.severity.as_str(),
                d.code,
                d.message
            )?;
        } else {
            writeln!(out, "{}:{d}", r.file)?;
        }
    }
    let count = |s: Severity| r.diagnostics.iter().filter(|d| d.severity == s).count();
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let executable = r.processes.iter().filter(|p| p.executable).count();
    let verdict = if r.ok { "ok" } else { "invalid" };
    writeln!(
        out,
        "{}: {verdict}: {} ({executable} executable), {}, {}",
        r.file,
        plural(r.processes.len(), "process", "processes"),
        plural(count(Severity::Error), "error", "errors"),
        plural(
            count(Severity::Info) + count(Severity::Warning),
            "note",
            "notes"
        ),
    )
}
