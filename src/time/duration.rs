//! ISO-8601 durations without calendar units.
//!
//! Invariant: an [`IsoDuration`] is an exact, non-negative span with nanosecond
//! precision. A day is exactly 24 hours and a week exactly 7 days (the engine
//! does not follow daylight-saving shifts: a timer is a span, not a wall-clock
//! reading). Months and years have no fixed length and are refused as
//! unsupported. `IsoDuration::parse(&d.to_string()) == Ok(d)` for every value.
use super::{cron, TimeError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

const NANOS_PER_SEC: u128 = 1_000_000_000;
const SECS_PER_DAY: u64 = 86_400;
/// Fraction digits beyond this many are below a nanosecond for every unit and are dropped.
const MAX_FRACTION_DIGITS: usize = 18;

/// An exact duration written in ISO 8601 (`PT1S`, `P2W`, `P1DT2H`, `PT0.5S`).
/// Months and years are refused as unsupported: their length is not fixed.
/// Serialises as its canonical ISO-8601 text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct IsoDuration(pub std::time::Duration);

/// The designators of the ISO-8601 duration format, in their required order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    Years,
    Months,
    Weeks,
    Days,
    Hours,
    Minutes,
    Seconds,
}

impl Unit {
    /// Length in nanoseconds; `None` for the calendar units.
    fn nanos(self) -> Option<u128> {
        let secs: u128 = match self {
            Unit::Years | Unit::Months => return None,
            Unit::Weeks => 7 * 86_400,
            Unit::Days => 86_400,
            Unit::Hours => 3_600,
            Unit::Minutes => 60,
            Unit::Seconds => 1,
        };
        Some(secs * NANOS_PER_SEC)
    }

    fn designator(self) -> char {
        match self {
            Unit::Years => 'Y',
            Unit::Months | Unit::Minutes => 'M',
            Unit::Weeks => 'W',
            Unit::Days => 'D',
            Unit::Hours => 'H',
            Unit::Seconds => 'S',
        }
    }
}

/// One `<number><designator>` of a duration, still as text.
struct Component<'a> {
    unit: Unit,
    whole: &'a str,
    fraction: Option<&'a str>,
}

impl IsoDuration {
    pub const ZERO: IsoDuration = IsoDuration(std::time::Duration::ZERO);

    /// Parse `P[nY][nM][nW][nD][T[nH][nM][nS]]`. Designators are case-insensitive;
    /// the last component may carry a fraction with `.` or `,` (`PT1,5S`);
    /// precision below a nanosecond is dropped. Errors: `TimerMalformed` for text
    /// that is not such a duration (empty, no `P`, nothing after `P`/`T`, units out
    /// of order or repeated, a sign, garbage, too large for the engine);
    /// `TimerUnsupported` for months, years and cron expressions.
    pub fn parse(s: &str) -> Result<IsoDuration, TimeError> {
        let text = s.trim();
        let bad = |why: String| {
            TimeError::malformed(format!("`{text}` is not an ISO-8601 duration: {why}"))
        };
        if text.is_empty() {
            return Err(TimeError::malformed(
                "empty duration: expected ISO 8601 such as PT30S or P1DT2H",
            ));
        }
        if cron::looks_like_cron(text) {
            return Err(cron::unsupported(text, "an ISO-8601 duration such as PT1H"));
        }
        let upper = text.to_ascii_uppercase();
        let components = match upper.as_bytes().first() {
            Some(b'-') => return Err(bad("a duration cannot be negative".into())),
            Some(b'+') => return Err(bad("a duration takes no sign".into())),
            Some(b'P') => lex(&upper[1..]).map_err(bad)?,
            _ => return Err(bad("it must start with `P` (e.g. PT30S, P1DT2H)".into())),
        };
        if components.iter().any(|c| c.unit.nanos().is_none()) {
            return Err(TimeError::unsupported(format!(
                "`{text}`: months and years are not supported (their length is not fixed); \
                 write days or weeks instead, e.g. P30D or P52W"
            )));
        }
        let mut total: u128 = 0;
        for c in &components {
            total = component_nanos(c)
                .and_then(|n| total.checked_add(n))
                .ok_or_else(|| bad("it is too large".into()))?;
        }
        let secs =
            u64::try_from(total / NANOS_PER_SEC).map_err(|_| bad("it is too large".into()))?;
        // The remainder is below 10^9, so it fits a u32.
        let nanos = (total % NANOS_PER_SEC) as u32;
        Ok(IsoDuration(std::time::Duration::new(secs, nanos)))
    }

    pub fn as_std(self) -> std::time::Duration {
        self.0
    }

    pub fn from_millis(ms: u64) -> IsoDuration {
        IsoDuration(std::time::Duration::from_millis(ms))
    }

    pub fn from_secs(secs: u64) -> IsoDuration {
        IsoDuration(std::time::Duration::from_secs(secs))
    }

    /// Whole nanoseconds (exact: a `Duration` always fits a u128).
    pub fn as_nanos(self) -> u128 {
        self.0.as_nanos()
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// `t + self`, saturating at the far future.
    pub fn after(self, t: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.0)
            .ok()
            .and_then(|d| t.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// Split the text after `P` into components, checking the grammar (not the units'
/// support). Errors are the reason, without the input (the caller adds it).
fn lex(body: &str) -> Result<Vec<Component<'_>>, String> {
    let bytes = body.as_bytes();
    let mut components: Vec<Component<'_>> = Vec::new();
    let mut in_time = false;
    let mut time_components = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'T' {
            if in_time {
                return Err("`T` appears twice".into());
            }
            in_time = true;
            i += 1;
            continue;
        }
        if !c.is_ascii_digit() {
            return Err(match c {
                b'-' => "a duration cannot be negative".into(),
                b'.' | b',' => "a decimal mark needs a digit before it (e.g. PT0.5S)".into(),
                _ => {
                    let ch = body[i..].chars().next().unwrap_or('?');
                    format!("unexpected `{ch}` at position {}", i + 2)
                }
            });
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let whole = &body[start..i];
        let mut fraction = None;
        if i < bytes.len() && (bytes[i] == b'.' || bytes[i] == b',') {
            i += 1;
            let fstart = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if fstart == i {
                return Err("a decimal mark must be followed by digits".into());
            }
            fraction = Some(&body[fstart..i]);
        }
        let Some(&d) = bytes.get(i) else {
            return Err(format!(
                "the number `{}` has no unit designator",
                &body[start..i]
            ));
        };
        let unit = match (in_time, d) {
            (false, b'Y') => Unit::Years,
            (false, b'M') => Unit::Months,
            (false, b'W') => Unit::Weeks,
            (false, b'D') => Unit::Days,
            (true, b'H') => Unit::Hours,
            (true, b'M') => Unit::Minutes,
            (true, b'S') => Unit::Seconds,
            (false, b'H' | b'S') => {
                return Err("hours, minutes and seconds go after `T` (e.g. PT5M)".into())
            }
            (true, b'Y' | b'W' | b'D') => {
                return Err(format!("`{}` goes before `T` (e.g. P1DT2H)", d as char));
            }
            _ => {
                let ch = body[i..].chars().next().unwrap_or('?');
                return Err(format!(
                    "`{ch}` is not a unit designator (Y, M, W, D, T, H, M, S)"
                ));
            }
        };
        i += 1;
        if let Some(prev) = components.last() {
            if unit <= prev.unit {
                return Err(format!(
                    "`{}` after `{}`: units must appear once each, in the order Y M W D T H M S",
                    unit.designator(),
                    prev.unit.designator()
                ));
            }
            if prev.fraction.is_some() {
                return Err("only the last component may have a fraction".into());
            }
        }
        if in_time {
            time_components += 1;
        }
        components.push(Component {
            unit,
            whole,
            fraction,
        });
    }
    if components.is_empty() {
        return Err("it has no components (zero is written PT0S)".into());
    }
    if in_time && time_components == 0 {
        return Err("`T` must be followed by hours, minutes or seconds".into());
    }
    Ok(components)
}

/// The exact length of one supported component, `None` on overflow.
fn component_nanos(c: &Component<'_>) -> Option<u128> {
    let unit = c.unit.nanos()?;
    let mut whole: u128 = 0;
    for b in c.whole.bytes() {
        whole = whole.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
    }
    let mut total = whole.checked_mul(unit)?;
    if let Some(f) = c.fraction {
        let digits = &f[..f.len().min(MAX_FRACTION_DIGITS)];
        let mut value: u128 = 0;
        let mut scale: u128 = 1;
        for b in digits.bytes() {
            value = value * 10 + u128::from(b - b'0');
            scale *= 10;
        }
        // value < 10^18 and unit ≤ 6.1 × 10^14: the product fits a u128.
        total = total.checked_add(value * unit / scale)?;
    }
    Some(total)
}

impl std::fmt::Display for IsoDuration {
    /// Canonical ISO-8601 text, e.g. `PT1.5S`, `P1DT2H`, `PT0S`: days, hours,
    /// minutes, seconds, zero components omitted (weeks are written as days).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.0.as_secs();
        let nanos = self.0.subsec_nanos();
        if secs == 0 && nanos == 0 {
            return f.write_str("PT0S");
        }
        let days = secs / SECS_PER_DAY;
        let rest = secs % SECS_PER_DAY;
        let (h, m, s) = (rest / 3_600, rest % 3_600 / 60, rest % 60);
        f.write_str("P")?;
        if days > 0 {
            write!(f, "{days}D")?;
        }
        if rest == 0 && nanos == 0 {
            return Ok(());
        }
        f.write_str("T")?;
        if h > 0 {
            write!(f, "{h}H")?;
        }
        if m > 0 {
            write!(f, "{m}M")?;
        }
        if s > 0 || nanos > 0 {
            write!(f, "{s}")?;
            if nanos > 0 {
                let frac = format!("{nanos:09}");
                write!(f, ".{}", frac.trim_end_matches('0'))?;
            }
            f.write_str("S")?;
        }
        Ok(())
    }
}

impl Serialize for IsoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IsoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        IsoDuration::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::Code;
    use std::time::Duration;

    fn secs(s: &str) -> f64 {
        match IsoDuration::parse(s) {
            Ok(d) => d.0.as_secs_f64(),
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn code(s: &str) -> Code {
        match IsoDuration::parse(s) {
            Ok(d) => panic!("{s} parsed as {d:?}"),
            Err(e) => e.code,
        }
    }

    #[test]
    fn parses_every_supported_unit() {
        assert_eq!(secs("PT0S"), 0.0);
        assert_eq!(secs("P0D"), 0.0);
        assert_eq!(secs("PT1S"), 1.0);
        assert_eq!(secs("PT5M"), 300.0);
        assert_eq!(secs("PT2H"), 7_200.0);
        assert_eq!(secs("P1D"), 86_400.0, "a day is exactly 24 hours");
        assert_eq!(secs("P2W"), 14.0 * 86_400.0);
        assert_eq!(secs("P1DT2H30M"), 86_400.0 + 9_000.0);
        assert_eq!(secs("P1W2DT3H4M5S"), 9.0 * 86_400.0 + 3.0 * 3_600.0 + 245.0);
        assert_eq!(secs("pt1h"), 3_600.0, "designators are case-insensitive");
        assert_eq!(
            secs("  PT1H \n"),
            3_600.0,
            "surrounding whitespace is ignored"
        );
    }

    #[test]
    fn parses_fractions_with_dot_or_comma() {
        assert_eq!(
            IsoDuration::parse("PT0.5S"),
            Ok(IsoDuration::from_millis(500))
        );
        assert_eq!(
            IsoDuration::parse("PT1,5S"),
            Ok(IsoDuration::from_millis(1_500))
        );
        assert_eq!(
            IsoDuration::parse("PT0.000000001S"),
            Ok(IsoDuration(Duration::from_nanos(1)))
        );
        assert_eq!(
            IsoDuration::parse("PT0.0000000019S"),
            Ok(IsoDuration(Duration::from_nanos(1)))
        );
        assert_eq!(
            IsoDuration::parse("PT1.5H"),
            Ok(IsoDuration::from_secs(5_400))
        );
        assert_eq!(
            IsoDuration::parse("P0.5D"),
            Ok(IsoDuration::from_secs(43_200))
        );
    }

    #[test]
    fn malformed_expressions_are_malformed() {
        for s in [
            "",
            "   ",
            "P",
            "PT",
            "P1DT",
            "1H",
            "T1H",
            "PT1H30",
            "PT1S1M",
            "PT1H1H",
            "P1D1W",
            "P1DT2D",
            "PT1D",
            "P1H",
            "-PT1S",
            "PT-1S",
            "+PT1S",
            "PT.5S",
            "PT1.S",
            "PT1.5H2M",
            "PTT1S",
            "P1X",
            "hello",
            "PT1 S",
            "PT1Sx",
            "P1Y2M3",
            "PT1Hé",
            "2026-01-01T00:00:00Z",
        ] {
            assert_eq!(code(s), Code::TimerMalformed, "{s:?}");
        }
    }

    #[test]
    fn overflow_is_malformed_not_a_panic() {
        for s in [
            "PT18446744073709551616S",
            "P30500000000000000W",
            "PT99999999999999999999999999999999999999999999H",
            "P18446744073709551615DT1S",
        ] {
            assert_eq!(code(s), Code::TimerMalformed, "{s}");
        }
        assert_eq!(secs("PT18446744073709551615S"), 18446744073709551615.0);
    }

    #[test]
    fn months_years_and_cron_are_unsupported() {
        for s in [
            "P1M",
            "P1Y",
            "P1Y2M",
            "P1Y2M3DT4H",
            "P0Y",
            "P1.5Y",
            "0 0 * * *",
            "*/5 * * * * ?",
            "@daily",
        ] {
            assert_eq!(code(s), Code::TimerUnsupported, "{s}");
        }
        let cron = IsoDuration::parse("0 0 * * *").unwrap_err();
        assert!(
            cron.message.contains("cron is not supported"),
            "{}",
            cron.message
        );
        let month = IsoDuration::parse("P1M").unwrap_err();
        assert!(
            month.message.contains("months and years"),
            "{}",
            month.message
        );
    }

    #[test]
    fn malformed_wins_over_unsupported() {
        // Only well-formed text can be "unsupported".
        assert_eq!(code("P1MT"), Code::TimerMalformed);
        assert_eq!(code("P1M1Y"), Code::TimerMalformed);
    }

    #[test]
    fn display_is_canonical() {
        let cases = [
            (Duration::ZERO, "PT0S"),
            (Duration::from_millis(1_500), "PT1.5S"),
            (Duration::from_millis(500), "PT0.5S"),
            (Duration::from_nanos(1), "PT0.000000001S"),
            (Duration::from_secs(60), "PT1M"),
            (Duration::from_secs(86_400 + 7_200), "P1DT2H"),
            (Duration::from_secs(14 * 86_400), "P14D"),
            (Duration::from_secs(86_400 + 61), "P1DT1M1S"),
        ];
        for (d, text) in cases {
            assert_eq!(IsoDuration(d).to_string(), text);
            assert_eq!(IsoDuration::parse(text), Ok(IsoDuration(d)));
        }
        let max = IsoDuration(Duration::MAX);
        assert_eq!(IsoDuration::parse(&max.to_string()), Ok(max));
    }

    #[test]
    fn serde_uses_the_canonical_text() {
        let d = IsoDuration::from_millis(90_000);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, "\"PT1M30S\"");
        assert_eq!(serde_json::from_str::<IsoDuration>(&json).unwrap(), d);
        assert!(serde_json::from_str::<IsoDuration>("\"P1M\"").is_err());
    }

    #[test]
    fn after_saturates() {
        let t = DateTime::<Utc>::MAX_UTC;
        assert_eq!(IsoDuration::from_secs(1).after(t), DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            IsoDuration(Duration::MAX).after(DateTime::<Utc>::MIN_UTC),
            DateTime::<Utc>::MAX_UTC
        );
    }
}
