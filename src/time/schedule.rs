//! Repeating intervals and the schedule grid.
//!
//! Invariant: a cycle's slots form a grid fixed at arming time — slot k is at
//! `base + k × interval` for `k < repetitions` (`k < u64::MAX` when unbounded)
//! and while that instant is representable. Nothing here bursts: [`Cycle::catch_up`]
//! fires at most one slot per call, and every slot it passes over spends a repeat.
//! All arithmetic runs on i128 nanoseconds with checked operations: no instant,
//! interval or count makes it overflow or panic.
use super::{cron, parse_date_time, IsoDuration, TimeError};
use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

const NANOS_PER_SEC: i128 = 1_000_000_000;

/// `R[n]/[start/]interval`. Slot k (0-based) is at `base + k × interval`, where
/// `base` is `start` when written, else the arming instant + one interval.
/// `repetitions: None` is unbounded (`R/PT10M`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cycle {
    pub repetitions: Option<u32>,
    pub start: Option<DateTime<FixedOffset>>,
    pub interval: IsoDuration,
}

/// What a schedule should do at `now`: fire once (coalescing every missed
/// slot), and where its next slot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatchUp {
    /// The slot index to fire now, if any slot is due.
    pub fire: Option<u64>,
    /// How many due slots were coalesced into that one fire (0 when on time).
    pub skipped: u64,
    /// The next slot after `now` within the budget: (index, instant).
    pub next: Option<(u64, DateTime<Utc>)>,
}

/// The grid of one cycle armed at one instant, in nanoseconds since the epoch.
struct Grid {
    base: i128,
    step: i128,
    /// Slot indices are `0..limit`.
    limit: u64,
}

impl Grid {
    /// The instant of slot k, `None` beyond the budget or the representable range.
    fn slot(&self, k: u64) -> Option<DateTime<Utc>> {
        if k >= self.limit {
            return None;
        }
        let at = self
            .step
            .checked_mul(i128::from(k))?
            .checked_add(self.base)?;
        from_nanos(at)
    }

    /// The last index whose slot is at or before `t` (ignoring the budget's lower end).
    fn last_at_or_before(&self, t: i128) -> Option<u64> {
        if t < self.base || self.limit == 0 {
            return None;
        }
        let last = self.limit - 1;
        if self.step == 0 {
            return Some(last);
        }
        // (t - base) is non-negative and far below i128::MAX; so is the quotient.
        let k = (t - self.base) / self.step;
        Some(u64::try_from(k).map_or(last, |k| k.min(last)))
    }
}

impl Cycle {
    /// Parse `R[n]/[start/]interval` (`R3/PT1H`, `R/PT10M`,
    /// `R5/2026-01-01T00:00:00Z/PT1H`). `R0` (no slot) is accepted. Errors:
    /// `TimerMalformed` for garbage, a bad count, a bad part, a zero interval (it
    /// would burst); `TimerUnsupported` for cron, months or years in the interval,
    /// and the ISO forms `R[n]/interval/end` and `R[n]/start/end`.
    pub fn parse(s: &str) -> Result<Cycle, TimeError> {
        let text = s.trim();
        if text.is_empty() {
            return Err(TimeError::malformed(
                "empty cycle: expected ISO 8601 R[n]/[start/]interval, e.g. R/PT1H or R3/2026-01-01T00:00:00Z/PT1H",
            ));
        }
        if cron::looks_like_cron(text) {
            return Err(cron::unsupported(
                text,
                "an ISO-8601 repeating interval such as R/PT1H",
            ));
        }
        let bad =
            |why: String| TimeError::malformed(format!("`{text}` is not an ISO-8601 cycle: {why}"));
        let in_cycle = |e: TimeError| TimeError {
            message: format!("cycle `{text}`: {}", e.message),
            ..e
        };
        let parts: Vec<&str> = text.split('/').collect();
        let head = parts.first().copied().unwrap_or_default();
        let Some(count) = head.strip_prefix(['R', 'r']) else {
            if IsoDuration::parse(text).is_ok() {
                return Err(bad(format!(
                    "a cycle repeats a duration: write R/{text} (unbounded) or Rn/{text}"
                )));
            }
            return Err(bad(
                "it must start with `R` (R[n]/[start/]interval, e.g. R/PT1H)".into(),
            ));
        };
        let repetitions = if count.is_empty() {
            None
        } else if count.bytes().all(|b| b.is_ascii_digit()) {
            Some(
                count
                    .parse::<u32>()
                    .map_err(|_| bad(format!("the count `{count}` is above {}", u32::MAX)))?,
            )
        } else {
            return Err(bad(format!(
                "`R{count}`: the repetition count must be digits (or nothing for unbounded)"
            )));
        };
        let (start, interval) = match parts[1..] {
            [] => return Err(bad("it has no interval after `R` (e.g. R/PT1H)".into())),
            [interval] if !is_duration(interval) => {
                parse_date_time(interval).map_err(in_cycle)?;
                return Err(bad(
                    "a start alone does not repeat: add an interval (R/start/PT1H)".into(),
                ));
            }
            [interval] => (None, interval),
            [start, interval] => match (is_duration(start), is_duration(interval)) {
                (false, true) => (Some(parse_date_time(start).map_err(in_cycle)?), interval),
                (true, false) => {
                    IsoDuration::parse(start).map_err(in_cycle)?;
                    parse_date_time(interval).map_err(in_cycle)?;
                    return Err(TimeError::unsupported(format!(
                        "cycle `{text}`: the form R[n]/interval/end is not supported; write R[n]/start/interval"
                    )));
                }
                (false, false) => {
                    parse_date_time(start).map_err(in_cycle)?;
                    parse_date_time(interval).map_err(in_cycle)?;
                    return Err(TimeError::unsupported(format!(
                        "cycle `{text}`: the form R[n]/start/end is not supported; write R[n]/start/interval"
                    )));
                }
                (true, true) => {
                    return Err(bad("it has two intervals; write R[n]/start/interval".into()))
                }
            },
            _ => {
                return Err(bad(
                    "it has too many `/` parts (R[n]/[start/]interval)".into()
                ))
            }
        };
        let interval = IsoDuration::parse(interval).map_err(in_cycle)?;
        if interval.is_zero() {
            return Err(bad("a zero interval would fire every slot at once".into()));
        }
        Ok(Cycle {
            repetitions,
            start,
            interval,
        })
    }

    /// The grid for this cycle armed at `armed_at`.
    fn grid(&self, armed_at: DateTime<Utc>) -> Grid {
        // A std Duration is below 1.9 × 10^28 ns: it fits an i128.
        let step = i128::try_from(self.interval.as_nanos()).unwrap_or(i128::MAX);
        let base = match self.start {
            Some(start) => to_nanos(start.with_timezone(&Utc)),
            None => to_nanos(armed_at).saturating_add(step),
        };
        let limit = self.repetitions.map_or(u64::MAX, u64::from);
        Grid { base, step, limit }
    }

    /// The instant of slot `k`, or `None` when `k` is beyond the repeat budget
    /// (or the slot lies beyond the representable range of instants).
    pub fn slot(&self, armed_at: DateTime<Utc>, k: u64) -> Option<DateTime<Utc>> {
        self.grid(armed_at).slot(k)
    }

    /// The first slot strictly after `t` within the budget: (index, instant).
    pub fn next_slot_after(
        &self,
        armed_at: DateTime<Utc>,
        t: DateTime<Utc>,
    ) -> Option<(u64, DateTime<Utc>)> {
        let grid = self.grid(armed_at);
        let k = match grid.last_at_or_before(to_nanos(t)) {
            None => 0,
            Some(k) => k.checked_add(1)?,
        };
        grid.slot(k).map(|at| (k, at))
    }

    /// Given the slot last fired (None = never) and `now`: which slot fires now,
    /// how many were skipped, and the next one. Each skipped slot spends a repeat.
    ///
    /// The due slots are those with index > `last_fired` whose instant is ≤ `now`.
    /// None due: no fire, and `next` is the first slot after `last_fired` (which
    /// is after `now`). Some due: the latest fires, the others count as `skipped`,
    /// and `next` is the slot after the fired one (if the budget has one).
    pub fn catch_up(
        &self,
        armed_at: DateTime<Utc>,
        last_fired: Option<u64>,
        now: DateTime<Utc>,
    ) -> CatchUp {
        let grid = self.grid(armed_at);
        let done = CatchUp {
            fire: None,
            skipped: 0,
            next: None,
        };
        let first = match last_fired {
            None => 0,
            Some(f) => match f.checked_add(1) {
                Some(first) => first,
                None => return done,
            },
        };
        match grid.last_at_or_before(to_nanos(now)) {
            Some(fire) if fire >= first => CatchUp {
                fire: Some(fire),
                skipped: fire - first,
                next: fire
                    .checked_add(1)
                    .and_then(|k| grid.slot(k).map(|at| (k, at))),
            },
            _ => CatchUp {
                next: grid.slot(first).map(|at| (first, at)),
                ..done
            },
        }
    }
}

impl std::fmt::Display for Cycle {
    /// Canonical ISO-8601 text, e.g. `R3/PT1H`, `R/2026-01-01T00:00:00Z/PT10M`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("R")?;
        if let Some(n) = self.repetitions {
            write!(f, "{n}")?;
        }
        if let Some(start) = self.start {
            write!(f, "/{}", start.to_rfc3339_opts(SecondsFormat::AutoSi, true))?;
        }
        write!(f, "/{}", self.interval)
    }
}

/// Whether a cycle part is written as a duration (the rest are date-times).
fn is_duration(part: &str) -> bool {
    part.trim_start().starts_with(['P', 'p'])
}

/// Nanoseconds since the epoch. A leap second (chrono's nanosecond field ≥ 10^9)
/// counts as the last nanosecond of the second before it, which keeps the order
/// of every instant against every non-leap instant.
pub(crate) fn to_nanos(t: DateTime<Utc>) -> i128 {
    let nanos = t.timestamp_subsec_nanos().min(999_999_999);
    i128::from(t.timestamp()) * NANOS_PER_SEC + i128::from(nanos)
}

/// The instant `n` nanoseconds after the epoch, if representable.
pub(crate) fn from_nanos(n: i128) -> Option<DateTime<Utc>> {
    let secs = i64::try_from(n.div_euclid(NANOS_PER_SEC)).ok()?;
    // rem_euclid is in 0..10^9.
    let nanos = u32::try_from(n.rem_euclid(NANOS_PER_SEC)).ok()?;
    DateTime::from_timestamp(secs, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::Code;

    fn utc(s: &str) -> DateTime<Utc> {
        parse_date_time(s).unwrap().with_timezone(&Utc)
    }

    fn code(s: &str) -> Code {
        match Cycle::parse(s) {
            Ok(c) => panic!("{s} parsed as {c:?}"),
            Err(e) => e.code,
        }
    }

    fn hourly(repetitions: Option<u32>) -> Cycle {
        Cycle {
            repetitions,
            start: None,
            interval: IsoDuration::from_secs(3_600),
        }
    }

    #[test]
    fn parses_the_supported_forms() {
        assert_eq!(Cycle::parse("R3/PT1H").unwrap(), hourly(Some(3)));
        assert_eq!(Cycle::parse("R/PT1H").unwrap(), hourly(None));
        assert_eq!(Cycle::parse("R0/PT1H").unwrap(), hourly(Some(0)));
        assert_eq!(
            Cycle::parse(" r4294967295/pt1h ").unwrap(),
            hourly(Some(u32::MAX))
        );
        let c = Cycle::parse("R5/2026-01-01T00:00:00Z/PT1H").unwrap();
        assert_eq!(c.repetitions, Some(5));
        assert_eq!(
            c.start.map(|s| s.with_timezone(&Utc)),
            Some(utc("2026-01-01T00:00:00Z"))
        );
        assert_eq!(c.interval, IsoDuration::from_secs(3_600));
    }

    #[test]
    fn malformed_cycles_are_malformed() {
        for s in [
            "",
            "R",
            "R3",
            "R3/",
            "R/",
            "PT1H",
            "X3/PT1H",
            "R-1/PT1H",
            "R1.5/PT1H",
            "R4294967296/PT1H",
            "R3/PT0S",
            "R/P0D",
            "R3/PT1H/PT2H",
            "R3/2026-01-01T00:00:00Z",
            "R3/2026-01-01T00:00:00/PT1H",
            "R3/a/b/c",
            "R3//PT1H",
            "R3/PT",
            "R3/garbage",
            "R3/PT1H/",
            "hello world",
        ] {
            assert_eq!(code(s), Code::TimerMalformed, "{s:?}");
        }
        let e = Cycle::parse("PT1H").unwrap_err();
        assert!(e.message.contains("R/PT1H"), "{}", e.message);
    }

    #[test]
    fn unsupported_cycles_are_unsupported() {
        for s in [
            "R3/PT1H/2026-01-01T00:00:00Z",
            "R/2026-01-01T00:00:00Z/2026-02-01T00:00:00Z",
            "R/P1M",
            "R12/2026-01-01T00:00:00Z/P1Y",
            "0 0 * * *",
            "*/5 * * * * ?",
            "0 0 12 ? * WED",
        ] {
            assert_eq!(code(s), Code::TimerUnsupported, "{s:?}");
        }
        let e = Cycle::parse("0 0 * * *").unwrap_err();
        assert!(e.message.contains("cron is not supported"), "{}", e.message);
        // Well-formedness is checked first: a bad end in the unsupported form is malformed.
        assert_eq!(code("R3/PT1H/not-a-date"), Code::TimerMalformed);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "R3/PT1H",
            "R/PT10M",
            "R0/P1D",
            "R5/2026-01-01T00:00:00Z/PT1.5S",
        ] {
            let c = Cycle::parse(s).unwrap();
            assert_eq!(c.to_string(), s);
            assert_eq!(Cycle::parse(&c.to_string()).unwrap(), c);
        }
    }

    #[test]
    fn slots_sit_on_the_grid_within_the_budget() {
        let armed = utc("2026-01-01T00:00:00Z");
        let c = hourly(Some(3));
        assert_eq!(
            c.slot(armed, 0),
            Some(utc("2026-01-01T01:00:00Z")),
            "base = armed + interval"
        );
        assert_eq!(c.slot(armed, 2), Some(utc("2026-01-01T03:00:00Z")));
        assert_eq!(c.slot(armed, 3), None, "R3 has slots 0, 1, 2");
        let started = Cycle::parse("R2/2026-06-01T12:00:00+02:00/PT30M").unwrap();
        assert_eq!(
            started.slot(armed, 0),
            Some(utc("2026-06-01T10:00:00Z")),
            "base = start"
        );
        assert_eq!(started.slot(armed, 1), Some(utc("2026-06-01T10:30:00Z")));
        assert_eq!(hourly(Some(0)).slot(armed, 0), None);
    }

    #[test]
    fn next_slot_after_is_strictly_later() {
        let armed = utc("2026-01-01T00:00:00Z");
        let c = hourly(None);
        assert_eq!(
            c.next_slot_after(armed, armed),
            Some((0, utc("2026-01-01T01:00:00Z")))
        );
        assert_eq!(
            c.next_slot_after(armed, utc("2026-01-01T01:00:00Z")),
            Some((1, utc("2026-01-01T02:00:00Z")))
        );
        assert_eq!(
            c.next_slot_after(armed, utc("2026-01-01T01:59:59Z")),
            Some((1, utc("2026-01-01T02:00:00Z")))
        );
        assert_eq!(
            hourly(Some(2)).next_slot_after(armed, utc("2026-01-01T02:00:00Z")),
            None
        );
    }

    #[test]
    fn catch_up_on_time_fires_without_skipping() {
        let armed = utc("2026-01-01T00:00:00Z");
        let c = hourly(Some(3));
        let early = c.catch_up(armed, None, utc("2026-01-01T00:30:00Z"));
        assert_eq!(
            early,
            CatchUp {
                fire: None,
                skipped: 0,
                next: Some((0, utc("2026-01-01T01:00:00Z")))
            }
        );
        let on_time = c.catch_up(armed, None, utc("2026-01-01T01:00:00Z"));
        assert_eq!(
            on_time,
            CatchUp {
                fire: Some(0),
                skipped: 0,
                next: Some((1, utc("2026-01-01T02:00:00Z")))
            }
        );
        let again = c.catch_up(armed, Some(0), utc("2026-01-01T01:00:00Z"));
        assert_eq!(
            again,
            CatchUp {
                fire: None,
                skipped: 0,
                next: Some((1, utc("2026-01-01T02:00:00Z")))
            }
        );
    }

    #[test]
    fn a_cycle_never_bursts_and_skips_spend_the_budget() {
        let armed = utc("2026-01-01T00:00:00Z");
        // Down across three slots of R/PT1H: one fire, two skipped, then the next slot.
        let unbounded = hourly(None).catch_up(armed, None, utc("2026-01-01T03:30:00Z"));
        assert_eq!(
            unbounded,
            CatchUp {
                fire: Some(2),
                skipped: 2,
                next: Some((3, utc("2026-01-01T04:00:00Z")))
            }
        );
        // R3/PT1H down across all three slots: fires once and is done.
        let bounded = hourly(Some(3)).catch_up(armed, None, utc("2026-01-01T09:00:00Z"));
        assert_eq!(
            bounded,
            CatchUp {
                fire: Some(2),
                skipped: 2,
                next: None
            }
        );
        // After the last slot fired there is nothing left.
        assert_eq!(
            hourly(Some(3)).catch_up(armed, Some(2), utc("2027-01-01T00:00:00Z")),
            CatchUp {
                fire: None,
                skipped: 0,
                next: None
            }
        );
        // R0 never fires.
        assert_eq!(
            hourly(Some(0)).catch_up(armed, None, utc("2027-01-01T00:00:00Z")),
            CatchUp {
                fire: None,
                skipped: 0,
                next: None
            }
        );
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        let cycles = [
            Cycle {
                repetitions: None,
                start: None,
                interval: IsoDuration(std::time::Duration::MAX),
            },
            Cycle {
                repetitions: Some(u32::MAX),
                start: None,
                interval: IsoDuration(std::time::Duration::from_nanos(1)),
            },
            Cycle {
                repetitions: None,
                start: None,
                interval: IsoDuration::ZERO,
            },
            Cycle {
                repetitions: None,
                start: Some(DateTime::<Utc>::MAX_UTC.fixed_offset()),
                interval: IsoDuration::from_secs(1),
            },
        ];
        let instants = [
            DateTime::<Utc>::MIN_UTC,
            utc("2026-01-01T00:00:00Z"),
            DateTime::<Utc>::MAX_UTC,
        ];
        for c in &cycles {
            for &armed in &instants {
                for &now in &instants {
                    for last in [None, Some(0), Some(u64::MAX - 1), Some(u64::MAX)] {
                        let r = c.catch_up(armed, last, now);
                        assert!(r.fire.is_none() || r.fire > last, "{c:?} {r:?}");
                    }
                    let _ = c.next_slot_after(armed, now);
                    let _ = c.slot(armed, u64::MAX);
                }
            }
        }
        // A zero interval (only constructible by hand) fires its last slot once, with no next.
        let zero = &cycles[2];
        let armed = utc("2026-01-01T00:00:00Z");
        let r = zero.catch_up(armed, None, armed);
        assert_eq!(
            r,
            CatchUp {
                fire: Some(u64::MAX - 1),
                skipped: u64::MAX - 1,
                next: None
            }
        );
    }
}
