//! How an attempt ended, and the classification of raw results into that.
//!
//! Invariant: every way an attempt can end maps to exactly one [`Outcome`], by
//! type alone: a wasmtime error is classified by downcasting to
//! [`wasmtime::Trap`] (never by reading its text), a limiter flag, or a
//! deadline flag. Guest codes travel as strings; our own codes come from
//! [`Code`].

use crate::codes::{Code, ErrorClass};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The guest returned `ok` with valid JSON within the output cap.
    Completed { output: serde_json::Value },
    /// The guest returned a modelled `business` error: routed by the process,
    /// never retried.
    BusinessError {
        code: String,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// The attempt failed: a guest `failure`, a trap, a limit. The retry policy
    /// decides what happens next.
    Failed {
        code: String,
        class: ErrorClass,
        retryable: bool,
        message: String,
        details: Option<serde_json::Value>,
    },
}

impl Outcome {
    /// A failure with one of our own codes (class and retryability from the table).
    pub fn failed(code: Code, message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            code: code.as_str().to_string(),
            class: code.class(),
            retryable: code.retryable(),
            message: message.into(),
            details: None,
        }
    }

    /// The code of a business error or failure; `None` when completed.
    pub fn code(&self) -> Option<&str> {
        match self {
            Outcome::Completed { .. } => None,
            Outcome::BusinessError { code, .. } | Outcome::Failed { code, .. } => Some(code),
        }
    }

    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed { .. })
    }
}

/// The level of a guest log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// One line a guest logged through `sutra:task/host.log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

/// Everything kept about one attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptReport {
    pub outcome: Outcome,
    /// The tail of the guest's stderr (at most `Limits::capture_bytes`; a
    /// leading marker says how many bytes were dropped).
    pub stderr: String,
    /// The guest's log lines (capped; a last `warn` line says how many were dropped).
    pub logs: Vec<LogLine>,
    /// Fuel units burnt (0 if unknown, e.g. when the deadline cut a host call).
    pub fuel_used: u64,
    /// Wall-clock time from the start of the attempt (waiting for a pool slot
    /// excluded) to its end.
    pub elapsed: Duration,
    /// Its outbound calls (empty without an egress session).
    pub calls: crate::egress::CallRecord,
}

/// The error half of the WIT `result`, already out of the bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuestError {
    Business {
        code: String,
        message: String,
        details: Option<String>,
    },
    Failure {
        code: String,
        message: String,
        details: Option<String>,
    },
}

/// What the host knew about an attempt besides the call's result.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Flags {
    /// The memory limiter refused a growth.
    pub memory_hit: bool,
    /// The wall-clock deadline passed (epoch callback or timeout).
    pub deadline_hit: bool,
}

/// How many bytes of stderr go into a trap's message.
const STDERR_TAIL_IN_MESSAGE: usize = 2048;

/// The longest error code a guest may give (bytes). A code is an identifier
/// that flows, retry policies and boundaries match on, stored on every attempt
/// row: a longer one is replaced by `SUTRA.TASK.ERROR_CODE_INVALID`.
pub const MAX_GUEST_CODE: usize = 256;

/// A guest's code, or the code that says it was over the cap (and the
/// message then starts by saying so, with how the code began).
fn bounded_code(code: String, message: String) -> (String, String) {
    if code.len() <= MAX_GUEST_CODE {
        return (code, message);
    }
    let head = clip(code.chars().take(64).collect(), 64);
    (
        Code::TaskErrorCodeInvalid.as_str().to_string(),
        format!(
            "the guest's error code is {} bytes, over the cap of {MAX_GUEST_CODE} (it began `{head}`): {message}",
            code.len()
        ),
    )
}

/// Classify a returned value (the call itself succeeded).
pub(crate) fn classify_return(result: Result<String, GuestError>, output_cap: usize) -> Outcome {
    match result {
        Ok(text) => {
            if text.len() > output_cap {
                return Outcome::failed(
                    Code::TaskOutputInvalid,
                    format!(
                        "output is {} bytes, over the cap of {output_cap} bytes",
                        text.len()
                    ),
                );
            }
            match serde_json::from_str(&text) {
                Ok(output) => Outcome::Completed { output },
                Err(e) => {
                    Outcome::failed(Code::TaskOutputInvalid, format!("output is not JSON: {e}"))
                }
            }
        }
        Err(GuestError::Business {
            code,
            message,
            details,
        }) => {
            let (code, message) = bounded_code(code, message);
            Outcome::BusinessError {
                code,
                message: clip(message, output_cap),
                details: parse_details(details, output_cap),
            }
        }
        Err(GuestError::Failure {
            code,
            message,
            details,
        }) => {
            let details = parse_details(details, output_cap);
            let code = if code.is_empty() {
                Code::TaskFailed.as_str().to_string()
            } else {
                code
            };
            let (code, message) = bounded_code(code, message);
            let ours = Code::parse(&code);
            let class = details
                .as_ref()
                .and_then(|d| d.get("class"))
                .and_then(serde_json::Value::as_str)
                .and_then(ErrorClass::parse)
                .or(ours.map(Code::class))
                .unwrap_or(ErrorClass::Internal);
            Outcome::Failed {
                retryable: ours.is_none_or(Code::retryable),
                code,
                class,
                message: clip(message, output_cap),
                details,
            }
        }
    }
}

/// Classify an error raised while instantiating or calling the guest.
///
/// What ended the attempt wins over what happened before: the deadline, fuel
/// and the stack end an attempt themselves, so a guest that was refused
/// memory and then spun (retrying a failing `memory.grow`) until its
/// deadline is DEADLINE_EXCEEDED. A refused growth names any other trap,
/// which is then the guest giving up for want of memory (an allocator's
/// abort): MEMORY_LIMIT.
pub(crate) fn classify_error(error: &wasmtime::Error, flags: Flags, stderr: &str) -> Outcome {
    let trap = error.downcast_ref::<wasmtime::Trap>().copied();
    match trap {
        Some(wasmtime::Trap::Interrupt) => deadline_exceeded(),
        _ if flags.deadline_hit => deadline_exceeded(),
        Some(wasmtime::Trap::OutOfFuel) => {
            Outcome::failed(Code::TaskFuelExhausted, "the attempt ran out of fuel")
        }
        Some(wasmtime::Trap::StackOverflow) => Outcome::failed(
            Code::TaskStackOverflow,
            with_stderr("the guest overflowed its stack".to_string(), stderr),
        ),
        _ if flags.memory_hit => Outcome::failed(
            Code::TaskMemoryLimit,
            with_stderr(
                "the guest asked for more memory than its cap".to_string(),
                stderr,
            ),
        ),
        Some(trap) => trapped(
            format!("the guest trapped: {trap}"),
            format!("{trap:?}"),
            stderr,
        ),
        None => match error.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => trapped(
                format!("the guest exited with status {}", exit.0),
                "Exit".to_string(),
                stderr,
            ),
            // Not a trap of the guest's code: a host function refused the
            // call (wasmtime-wasi's random-bytes cap, a full resource table,
            // a poll over too many pollables). The whole chain is the cause.
            None => {
                let mut outcome = Outcome::failed(
                    Code::TaskResourceExhausted,
                    with_stderr(
                        format!("the host refused a call of the guest: {error:#}"),
                        stderr,
                    ),
                );
                if let Outcome::Failed { details, .. } = &mut outcome {
                    *details = Some(serde_json::json!({ "host": format!("{error:#}") }));
                }
                outcome
            }
        },
    }
}

/// The outcome of an attempt whose deadline passed.
pub(crate) fn deadline_exceeded() -> Outcome {
    Outcome::failed(
        Code::TaskDeadlineExceeded,
        "the attempt overran its wall-clock deadline",
    )
}

fn trapped(message: String, kind: String, stderr: &str) -> Outcome {
    let mut outcome = Outcome::failed(Code::TaskTrap, with_stderr(message, stderr));
    if let Outcome::Failed { details, .. } = &mut outcome {
        *details = Some(serde_json::json!({ "trap": kind }));
    }
    outcome
}

fn with_stderr(message: String, stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        return message;
    }
    format!(
        "{message}; stderr: {}",
        tail(stderr, STDERR_TAIL_IN_MESSAGE)
    )
}

/// Guest details are JSON text; anything else is kept as a JSON string.
fn parse_details(details: Option<String>, cap: usize) -> Option<serde_json::Value> {
    let text = details?;
    if text.len() > cap {
        return Some(serde_json::Value::String(format!(
            "[details dropped: {} bytes, over the cap of {cap} bytes]",
            text.len()
        )));
    }
    Some(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// At most `max` bytes of `s`, cut at a character boundary, with a marker if cut.
fn clip(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str("…[truncated]");
    s
}

/// The last (at most) `max` bytes of `s`, starting at a character boundary.
pub(crate) fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failure(code: &str, details: Option<&str>) -> Outcome {
        classify_return(
            Err(GuestError::Failure {
                code: code.into(),
                message: "m".into(),
                details: details.map(str::to_string),
            }),
            1024,
        )
    }

    #[test]
    fn ok_json_completes() {
        let o = classify_return(Ok(r#"{"a":1}"#.into()), 1024);
        assert_eq!(
            o,
            Outcome::Completed {
                output: json!({"a": 1})
            }
        );
    }

    #[test]
    fn ok_that_is_not_json_is_output_invalid() {
        let o = classify_return(Ok("nope".into()), 1024);
        assert_eq!(o.code(), Some("SUTRA.TASK.OUTPUT_INVALID"));
    }

    #[test]
    fn a_host_refusal_is_resource_exhausted_with_its_cause() {
        let error = wasmtime::Error::msg("requested len 2000000 exceeds limit 1048576")
            .context("wasi:random/random#get-random-bytes");
        match classify_error(&error, Flags::default(), "") {
            Outcome::Failed {
                code,
                class,
                message,
                retryable,
                ..
            } => {
                assert_eq!(code, "SUTRA.TASK.RESOURCE_EXHAUSTED");
                assert_eq!(class, ErrorClass::ResourceExhausted);
                assert!(retryable);
                assert!(message.contains("exceeds limit 1048576"), "{message}");
                assert!(message.contains("get-random-bytes"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_over_long_guest_code_is_replaced_by_one_that_says_so() {
        let long = "X".repeat(10 * 1024 * 1024);
        for business in [false, true] {
            let err = if business {
                GuestError::Business {
                    code: long.clone(),
                    message: "m".into(),
                    details: None,
                }
            } else {
                GuestError::Failure {
                    code: long.clone(),
                    message: "m".into(),
                    details: Some(r#"{"class":"transient"}"#.into()),
                }
            };
            let (code, message) = match classify_return(Err(err), 1 << 20) {
                Outcome::BusinessError { code, message, .. } => (code, message),
                Outcome::Failed {
                    code,
                    message,
                    class,
                    retryable,
                    ..
                } => {
                    assert_eq!(class, ErrorClass::Transient, "the guest's class stands");
                    assert!(retryable);
                    (code, message)
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(code, "SUTRA.TASK.ERROR_CODE_INVALID");
            assert!(message.len() < 400, "{}", message.len());
            assert!(
                message.contains("10485760 bytes") && message.contains("XXXX"),
                "{message}"
            );
        }
        // At the cap: the guest's own code.
        let at_cap = "C".repeat(MAX_GUEST_CODE);
        let err = GuestError::Failure {
            code: at_cap.clone(),
            message: "m".into(),
            details: None,
        };
        match classify_return(Err(err), 1 << 20) {
            Outcome::Failed { code, .. } => assert_eq!(code, at_cap),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ok_over_the_cap_is_output_invalid() {
        let o = classify_return(Ok(format!("\"{}\"", "x".repeat(100))), 50);
        assert_eq!(o.code(), Some("SUTRA.TASK.OUTPUT_INVALID"));
    }

    #[test]
    fn empty_failure_code_becomes_task_failed_internal_retryable() {
        match failure("", None) {
            Outcome::Failed {
                code,
                class,
                retryable,
                ..
            } => {
                assert_eq!(code, "SUTRA.TASK.FAILED");
                assert_eq!(class, ErrorClass::Internal);
                assert!(retryable);
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn guest_code_and_class_from_details_stand() {
        match failure("Api.Timeout", Some(r#"{"class":"rate_limit"}"#)) {
            Outcome::Failed {
                code,
                class,
                retryable,
                details,
                ..
            } => {
                assert_eq!(code, "Api.Timeout");
                assert_eq!(class, ErrorClass::RateLimit);
                assert!(retryable);
                assert_eq!(details, Some(json!({"class": "rate_limit"})));
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn unknown_class_defaults_to_internal() {
        match failure("X", Some(r#"{"class":"cosmic"}"#)) {
            Outcome::Failed { class, .. } => assert_eq!(class, ErrorClass::Internal),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn our_non_retryable_code_is_not_retryable() {
        match failure("SUTRA.TASK.VALIDATION", None) {
            Outcome::Failed {
                class, retryable, ..
            } => {
                assert!(!retryable);
                assert_eq!(class, ErrorClass::InvalidInput);
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn business_error_keeps_code_and_details() {
        let o = classify_return(
            Err(GuestError::Business {
                code: "ORDER_REJECTED".into(),
                message: "no".into(),
                details: Some("not json".into()),
            }),
            1024,
        );
        assert_eq!(
            o,
            Outcome::BusinessError {
                code: "ORDER_REJECTED".into(),
                message: "no".into(),
                details: Some(json!("not json")),
            }
        );
    }

    #[test]
    fn traps_map_by_kind() {
        let cases = [
            (wasmtime::Trap::OutOfFuel, "SUTRA.TASK.FUEL_EXHAUSTED"),
            (wasmtime::Trap::Interrupt, "SUTRA.TASK.DEADLINE_EXCEEDED"),
            (wasmtime::Trap::StackOverflow, "SUTRA.TASK.STACK_OVERFLOW"),
            (wasmtime::Trap::UnreachableCodeReached, "SUTRA.TASK.TRAP"),
            (wasmtime::Trap::IntegerDivisionByZero, "SUTRA.TASK.TRAP"),
        ];
        for (trap, code) in cases {
            let e = wasmtime::Error::from(trap);
            assert_eq!(
                classify_error(&e, Flags::default(), "").code(),
                Some(code),
                "{trap:?}"
            );
        }
    }

    #[test]
    fn limiter_flag_wins_over_the_trap_it_caused() {
        let e = wasmtime::Error::from(wasmtime::Trap::UnreachableCodeReached);
        let flags = Flags {
            memory_hit: true,
            deadline_hit: false,
        };
        assert_eq!(
            classify_error(&e, flags, "").code(),
            Some("SUTRA.TASK.MEMORY_LIMIT")
        );
    }

    #[test]
    fn the_deadline_and_fuel_win_over_a_refused_growth() {
        let flags = Flags {
            memory_hit: true,
            deadline_hit: false,
        };
        let interrupt = wasmtime::Error::from(wasmtime::Trap::Interrupt);
        assert_eq!(
            classify_error(&interrupt, flags, "").code(),
            Some("SUTRA.TASK.DEADLINE_EXCEEDED")
        );
        let fuel = wasmtime::Error::from(wasmtime::Trap::OutOfFuel);
        assert_eq!(
            classify_error(&fuel, flags, "").code(),
            Some("SUTRA.TASK.FUEL_EXHAUSTED")
        );
        let late = Flags {
            memory_hit: true,
            deadline_hit: true,
        };
        let host = wasmtime::Error::msg("cut in a host call");
        assert_eq!(
            classify_error(&host, late, "").code(),
            Some("SUTRA.TASK.DEADLINE_EXCEEDED")
        );
    }

    #[test]
    fn a_trap_message_carries_the_stderr_tail() {
        let e = wasmtime::Error::from(wasmtime::Trap::UnreachableCodeReached);
        let stderr = format!("{}panicked at src/lib.rs: boom\n", "x".repeat(5000));
        match classify_error(&e, Flags::default(), &stderr) {
            Outcome::Failed {
                message, details, ..
            } => {
                assert!(
                    message.ends_with("panicked at src/lib.rs: boom"),
                    "{message}"
                );
                assert!(message.len() < 2200);
                assert_eq!(details, Some(json!({"trap": "UnreachableCodeReached"})));
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn tail_respects_char_boundaries() {
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("abc", 10), "abc");
    }

    #[test]
    fn outcome_serialises_with_an_outcome_tag() {
        let v = serde_json::to_value(Outcome::failed(Code::TaskTrap, "t")).unwrap();
        assert_eq!(v["outcome"], "failed");
        assert_eq!(v["code"], "SUTRA.TASK.TRAP");
        assert_eq!(v["class"], "transient");
    }
}
