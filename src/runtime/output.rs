//! What a guest wrote during an attempt (its stderr, its `host.log` lines),
//! cut down to what the store keeps with the attempt's row, so the console
//! can show it beside the attempt.
//!
//! Invariants:
//! - the kept text is bounded per attempt whatever the guest wrote: at most
//!   [`STDERR_TAIL_BYTES`] of stderr (its end) and the last
//!   [`LOG_TAIL_LINES`] log lines holding at most [`LOG_TAIL_BYTES`] of
//!   message text (stored as JSON, so at most about 6× that when every
//!   character needs escaping); a marker says when something was cut;
//! - an attempt that wrote nothing keeps nothing (no row grows);
//! - cuts fall on character boundaries (the text stays valid UTF-8).

use crate::sandbox::{AttemptReport, LogLevel, LogLine};

/// The most stderr bytes kept per attempt (its last ones).
pub const STDERR_TAIL_BYTES: usize = 4 * 1024;
/// The most log lines kept per attempt (its last ones).
pub const LOG_TAIL_LINES: usize = 32;
/// The most message bytes those lines hold together.
pub const LOG_TAIL_BYTES: usize = 4 * 1024;

/// What the store keeps of an attempt's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Written {
    /// The tail of stderr.
    pub stderr: Option<String>,
    /// The last log lines, a JSON array of `{"level", "message"}`.
    pub logs: Option<String>,
    /// Its outbound calls, a JSON `CallRecord` (bounded by `egress::calls`).
    pub calls: Option<String>,
    /// Its input and output as JSON text, each bounded ([`step_io`]).
    pub input: Option<String>,
    pub output: Option<String>,
}

/// The most bytes of an attempt's input, and of its output, kept.
pub const STEP_IO_BYTES: usize = 64 * 1024;

/// What the store keeps of an attempt's input and of what it answered (a
/// completion's output, a failure's or business error's details, if any):
/// JSON text, each cut to [`STEP_IO_BYTES`] with a marker naming its whole
/// length (so no longer JSON then).
pub(crate) fn step_io(
    input: &serde_json::Value,
    outcome: &crate::engine::TaskOutcome,
) -> (Option<String>, Option<String>) {
    use crate::engine::TaskOutcome as O;
    let answered = match outcome {
        O::Completed { output } => Some(output),
        O::BusinessError { details, .. } | O::Failed { details, .. } => details.as_ref(),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    (Some(cut_json(input)), answered.map(cut_json))
}

fn cut_json(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() <= STEP_IO_BYTES {
        return s;
    }
    let marker = format!("\u{2026} [cut: {} bytes in all]", s.len());
    let end = floor_boundary(&s, STEP_IO_BYTES - marker.len());
    format!("{}{marker}", &s[..end])
}

impl Written {
    /// `self` (or nothing written) with the attempt's input and output.
    pub(crate) fn with_io(
        written: Option<Written>,
        (input, output): (Option<String>, Option<String>),
    ) -> Written {
        Written {
            input,
            output,
            ..written.unwrap_or_default()
        }
    }
}

impl Written {
    /// The bounded output of an attempt; `None` when it wrote nothing and called nothing.
    pub(crate) fn of(report: &AttemptReport) -> Option<Written> {
        let calls = (!report.calls.is_empty())
            .then(|| serde_json::to_string(&report.calls).ok())
            .flatten();
        match (bound(&report.stderr, &report.logs), calls) {
            (Some(mut w), calls) => {
                w.calls = calls;
                Some(w)
            }
            (None, Some(calls)) => Some(Written {
                calls: Some(calls),
                ..Written::default()
            }),
            (None, None) => None,
        }
    }
}

/// `stderr` and `logs` cut to the bounds above; `None` when both are empty.
pub(crate) fn bound(stderr: &str, logs: &[LogLine]) -> Option<Written> {
    let w = Written {
        stderr: (!stderr.is_empty()).then(|| stderr_tail(stderr)),
        logs: (!logs.is_empty()).then(|| log_tail(logs)),
        ..Written::default()
    };
    (w.stderr.is_some() || w.logs.is_some()).then_some(w)
}

/// The largest index `<= i` on a character boundary of `s`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn stderr_tail(s: &str) -> String {
    if s.len() <= STDERR_TAIL_BYTES {
        return s.to_string();
    }
    let marker = "[earlier output not kept]\n";
    let keep = STDERR_TAIL_BYTES - marker.len();
    let mut from = s.len() - keep;
    while !s.is_char_boundary(from) {
        from += 1;
    }
    format!("{marker}{}", &s[from..])
}

fn log_tail(logs: &[LogLine]) -> String {
    let mut kept: Vec<LogLine> = Vec::new();
    let mut bytes = 0;
    for line in logs.iter().rev() {
        if kept.len() == LOG_TAIL_LINES || bytes + line.message.len() > LOG_TAIL_BYTES {
            if kept.is_empty() {
                // One line over the whole budget: its beginning.
                let end = floor_boundary(&line.message, LOG_TAIL_BYTES);
                kept.push(LogLine {
                    level: line.level,
                    message: format!("{} [cut]", &line.message[..end]),
                });
            }
            break;
        }
        bytes += line.message.len();
        kept.push(line.clone());
    }
    let dropped = logs.len() - kept.len();
    if dropped > 0 {
        kept.push(LogLine {
            level: LogLevel::Warn,
            message: format!("[{dropped} earlier log lines not kept]"),
        });
    }
    kept.reverse();
    serde_json::to_string(&kept).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(message: impl Into<String>) -> LogLine {
        LogLine {
            level: LogLevel::Info,
            message: message.into(),
        }
    }

    fn lines(json: &str) -> Vec<LogLine> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn nothing_written_keeps_nothing() {
        assert_eq!(bound("", &[]), None);
    }

    #[test]
    fn small_output_is_kept_whole() {
        let w = bound("oops\n", &[line("one"), line("two")]).unwrap();
        assert_eq!(w.stderr.as_deref(), Some("oops\n"));
        let kept = lines(w.logs.as_deref().unwrap());
        assert_eq!(kept, vec![line("one"), line("two")]);
        assert_eq!(
            w.logs.as_deref(),
            Some(r#"[{"level":"info","message":"one"},{"level":"info","message":"two"}]"#)
        );
    }

    #[test]
    fn stderr_keeps_its_end_within_the_bound_on_a_char_boundary() {
        let s = format!("{}é{}", "a".repeat(10_000), "z".repeat(STDERR_TAIL_BYTES));
        let w = bound(&s, &[]).unwrap();
        let t = w.stderr.unwrap();
        assert!(t.len() <= STDERR_TAIL_BYTES, "{}", t.len());
        assert!(t.starts_with("[earlier output not kept]\n"));
        assert!(t.ends_with('z'));
        assert_eq!(w.logs, None);
        // A multibyte character across the cut is dropped whole.
        let s = "é".repeat(STDERR_TAIL_BYTES);
        let t = bound(&s, &[]).unwrap().stderr.unwrap();
        assert!(t.len() <= STDERR_TAIL_BYTES && t.ends_with('é'));
    }

    #[test]
    fn logs_keep_the_last_lines_within_both_bounds() {
        let many: Vec<LogLine> = (0..1000).map(|i| line(format!("line {i}"))).collect();
        let kept = lines(&bound("", &many).unwrap().logs.unwrap());
        assert_eq!(kept.len(), LOG_TAIL_LINES + 1);
        assert_eq!(
            kept[0].message,
            format!("[{} earlier log lines not kept]", 1000 - LOG_TAIL_LINES)
        );
        assert_eq!(kept.last().unwrap().message, "line 999");

        let big: Vec<LogLine> = (0..10)
            .map(|i| line(format!("{i}{}", "x".repeat(1500))))
            .collect();
        let kept = lines(&bound("", &big).unwrap().logs.unwrap());
        let text: usize = kept[1..].iter().map(|l| l.message.len()).sum();
        assert!(text <= LOG_TAIL_BYTES, "{text}");
        assert_eq!(kept.len(), 3, "two lines fit, plus the marker");
        assert!(kept[2].message.starts_with('9'));
    }

    #[test]
    fn one_huge_line_is_cut_not_lost() {
        let huge = vec![line("é".repeat(100_000))];
        let kept = lines(&bound("", &huge).unwrap().logs.unwrap());
        assert_eq!(kept.len(), 1);
        assert!(kept[0].message.len() <= LOG_TAIL_BYTES + " [cut]".len());
        assert!(kept[0].message.ends_with(" [cut]"));
    }
}
