//! Time: ISO-8601 durations, date-times and repeating intervals; schedule grid
//! arithmetic; the [`Clock`] every other layer reads time through.
//!
//! Invariant: nothing outside this module parses an ISO-8601 string or reads
//! the system clock directly. Every parse failure carries `TimerMalformed`
//! ("you wrote it wrong") or `TimerUnsupported` ("the engine does not do
//! that": months, years, cron); no input and no instant makes this module panic.

mod clock;
mod cron;
mod duration;
pub(crate) mod rfc3339;
mod schedule;

pub use clock::{Clock, SystemClock, VirtualClock};
pub use duration::IsoDuration;
pub use schedule::{CatchUp, Cycle};

use crate::codes::Code;
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why a timer expression was refused: `SUTRA.CONFIG.TIMER.MALFORMED` ("you wrote
/// it wrong") or `SUTRA.CONFIG.TIMER.UNSUPPORTED` ("the engine does not do that").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TimeError {
    pub code: Code,
    pub message: String,
}

impl TimeError {
    pub fn malformed(message: impl Into<String>) -> Self {
        TimeError {
            code: Code::TimerMalformed,
            message: message.into(),
        }
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        TimeError {
            code: Code::TimerUnsupported,
            message: message.into(),
        }
    }
}

/// One timer definition, as BPMN's `timeDuration` / `timeDate` / `timeCycle`,
/// an HX timeout or a States-language Wait produce it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum TimerSpec {
    /// Fires once, this long after the timer is armed.
    Duration(IsoDuration),
    /// Fires once, at this instant (an instant in the past fires at once).
    Date(DateTime<FixedOffset>),
    /// Fires on a grid of slots.
    Cycle(Cycle),
}

impl TimerSpec {
    pub fn parse_duration(s: &str) -> Result<TimerSpec, TimeError> {
        IsoDuration::parse(s).map(TimerSpec::Duration)
    }
    pub fn parse_date(s: &str) -> Result<TimerSpec, TimeError> {
        parse_date_time(s).map(TimerSpec::Date)
    }
    pub fn parse_cycle(s: &str) -> Result<TimerSpec, TimeError> {
        Cycle::parse(s).map(TimerSpec::Cycle)
    }

    /// The first instant this timer fires when armed at `armed_at`
    /// (for a cycle: its first slot; `None` if a cycle has no slot left).
    pub fn first_due(&self, armed_at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            TimerSpec::Duration(d) => Some(d.after(armed_at)),
            TimerSpec::Date(t) => Some(t.with_timezone(&Utc)),
            TimerSpec::Cycle(c) => c.slot(armed_at, 0),
        }
    }
}

/// Parse an ISO-8601 date-time with an offset (`2026-01-01T00:00:00Z`,
/// `2026-01-01T09:00:00+02:00`, also `+0200` and `+02`). A date-time without an
/// offset is malformed: an engine shared across zones must not guess one.
/// A cron expression is unsupported.
pub fn parse_date_time(s: &str) -> Result<DateTime<FixedOffset>, TimeError> {
    let text = s.trim();
    if text.is_empty() {
        return Err(TimeError::malformed(
            "empty date-time: expected ISO 8601 with an offset, e.g. 2026-01-01T00:00:00Z",
        ));
    }
    if cron::looks_like_cron(text) {
        return Err(cron::unsupported(
            text,
            "an ISO-8601 date-time such as 2026-01-01T00:00:00Z",
        ));
    }
    let rfc3339 = match DateTime::parse_from_rfc3339(text) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    if let Ok(t) = DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%#z") {
        return Ok(t);
    }
    let why = if NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok() {
        "it has no offset: append `Z` or `+hh:mm` (an engine shared across zones must not guess one)".to_string()
    } else if NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok() {
        "it is a date without a time and offset: write e.g. `2026-01-01T00:00:00Z`".to_string()
    } else {
        rfc3339.to_string()
    };
    Err(TimeError::malformed(format!(
        "`{text}` is not an ISO-8601 date-time with offset: {why}"
    )))
}

/// Milliseconds since the Unix epoch, rounded toward the past (what the store keeps
/// for an instant that was observed, e.g. a fire time).
pub fn to_millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Milliseconds since the Unix epoch, rounded toward the future: store a due time
/// this way so a timer never fires before its instant.
pub fn to_millis_ceil(t: DateTime<Utc>) -> i64 {
    let floor = t.timestamp_millis();
    if t.timestamp_subsec_nanos().is_multiple_of(1_000_000) {
        floor
    } else {
        floor.saturating_add(1)
    }
}

/// The instant `ms` milliseconds after the Unix epoch, saturating at the ends of
/// the representable range (a value read back from [`to_millis`] is always in it).
pub fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(if ms < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        parse_date_time(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn date_times_need_an_offset() {
        assert_eq!(
            utc("2026-01-01T00:00:00Z"),
            utc("2026-01-01T02:00:00+02:00")
        );
        assert_eq!(utc("2026-01-01T00:00:00Z"), utc("2026-01-01T02:00:00+0200"));
        assert_eq!(utc("2026-01-01T00:00:00Z"), utc("2026-01-01T02:00:00+02"));
        assert_eq!(
            utc("2026-01-01T00:00:00.250Z").timestamp_subsec_millis(),
            250
        );
        let off = parse_date_time("2026-01-01T09:00:00+02:00").unwrap();
        assert_eq!(
            off.offset().local_minus_utc(),
            7_200,
            "the written offset is kept"
        );
        for s in [
            "2026-01-01T00:00:00",
            "2026-01-01",
            "",
            "tomorrow",
            "2026-13-01T00:00:00Z",
            "PT1H",
        ] {
            let e = parse_date_time(s).unwrap_err();
            assert_eq!(e.code, Code::TimerMalformed, "{s}");
        }
        let e = parse_date_time("2026-01-01T00:00:00").unwrap_err();
        assert!(e.message.contains("no offset"), "{}", e.message);
    }

    #[test]
    fn cron_in_a_date_is_unsupported() {
        let e = parse_date_time("0 0 12 * * ?").unwrap_err();
        assert_eq!(e.code, Code::TimerUnsupported);
        assert!(e.message.contains("cron is not supported"));
    }

    #[test]
    fn timer_specs_parse_and_find_their_first_due() {
        let armed = utc("2026-01-01T00:00:00Z");
        let d = TimerSpec::parse_duration("PT90S").unwrap();
        assert_eq!(d.first_due(armed), Some(utc("2026-01-01T00:01:30Z")));
        let at = TimerSpec::parse_date("2025-06-01T00:00:00+02:00").unwrap();
        assert_eq!(at.first_due(armed), Some(utc("2025-05-31T22:00:00Z")));
        let c = TimerSpec::parse_cycle("R3/PT1H").unwrap();
        assert_eq!(c.first_due(armed), Some(utc("2026-01-01T01:00:00Z")));
        let none = TimerSpec::parse_cycle("R0/PT1H").unwrap();
        assert_eq!(none.first_due(armed), None);
        assert_eq!(
            TimerSpec::parse_duration("P1M").unwrap_err().code,
            Code::TimerUnsupported
        );
        let json = serde_json::to_value(&c).unwrap();
        let back: TimerSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn millis_round_toward_past_or_future() {
        let t = utc("2026-01-01T00:00:00.0005Z");
        assert_eq!(to_millis(t), 1_767_225_600_000);
        assert_eq!(to_millis_ceil(t), 1_767_225_600_001);
        let exact = utc("2026-01-01T00:00:00.001Z");
        assert_eq!(to_millis_ceil(exact), to_millis(exact));
        assert_eq!(from_millis(to_millis(exact)), exact);
        let before = utc("1969-12-31T23:59:59.9995Z");
        assert_eq!(to_millis(before), -1);
        assert_eq!(to_millis_ceil(before), 0);
        assert_eq!(from_millis(i64::MAX), DateTime::<Utc>::MAX_UTC);
        assert_eq!(from_millis(i64::MIN), DateTime::<Utc>::MIN_UTC);
    }
}
