//! Properties of `sutra::time`: durations round-trip through their canonical
//! text; parsing never panics and only ever refuses with the two timer codes;
//! the schedule grid never bursts, never exceeds its repeat budget, and agrees
//! with a brute-force walk of the grid.
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use std::time::Duration;
use sutra::time::{parse_date_time, CatchUp, Cycle, IsoDuration};
use sutra::Code;

const NANOS: i128 = 1_000_000_000;

fn instant_from(secs: i64, nanos: u32) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, nanos).unwrap()
}

/// Any representable instant, biased toward this century.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp();
    let max = DateTime::<Utc>::MAX_UTC.timestamp();
    prop_oneof![
        3 => (946_684_800i64..4_102_444_800, 0u32..1_000_000_000).prop_map(|(s, n)| instant_from(s, n)),
        1 => (min..=max, 0u32..1_000_000_000).prop_map(|(s, n)| instant_from(s, n)),
        1 => prop_oneof![Just(DateTime::<Utc>::MIN_UTC), Just(DateTime::<Utc>::MAX_UTC)],
    ]
}

/// A non-zero interval, from a nanosecond to the largest std Duration.
fn interval() -> impl Strategy<Value = IsoDuration> {
    prop_oneof![
        4 => (1u64..=86_400 * 14).prop_map(IsoDuration::from_secs),
        2 => (1u64..=10_000_000_000).prop_map(|n| IsoDuration(Duration::from_nanos(n))),
        1 => (0u64..=u64::MAX, 0u32..1_000_000_000)
            .prop_filter("non-zero", |(s, n)| *s > 0 || *n > 0)
            .prop_map(|(s, n)| IsoDuration(Duration::new(s, n))),
    ]
}

fn repetitions() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        Just(None),
        (0u32..20).prop_map(Some),
        any::<u32>().prop_map(Some)
    ]
}

fn cycle() -> impl Strategy<Value = Cycle> {
    (repetitions(), proptest::option::of(instant()), interval()).prop_map(
        |(repetitions, start, interval)| Cycle {
            repetitions,
            start: start.map(|s| s.fixed_offset()),
            interval,
        },
    )
}

fn last_fired() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        (0u64..50).prop_map(Some),
        any::<u64>().prop_map(Some)
    ]
}

fn nanos_of(t: DateTime<Utc>) -> i128 {
    i128::from(t.timestamp()) * NANOS + i128::from(t.timestamp_subsec_nanos())
}

/// `now` placed near the grid, so that a brute-force walk over the slots is short.
fn near(c: &Cycle, armed: DateTime<Utc>, offset_steps: i64, frac: u32) -> Option<DateTime<Utc>> {
    let base = c.start.map(|s| s.with_timezone(&Utc)).unwrap_or(armed);
    let step = i128::try_from(c.interval.as_nanos()).ok()?;
    let at = nanos_of(base) + step * i128::from(offset_steps) + step * i128::from(frac) / 1_000;
    let secs = i64::try_from(at.div_euclid(NANOS)).ok()?;
    DateTime::from_timestamp(secs, u32::try_from(at.rem_euclid(NANOS)).ok()?)
}

/// The due slots of (last_fired, now], by walking the grid one slot at a time.
fn due_by_walking(
    c: &Cycle,
    armed: DateTime<Utc>,
    last_fired: Option<u64>,
    now: DateTime<Utc>,
) -> Option<Vec<u64>> {
    let first = match last_fired {
        None => 0,
        Some(f) => f.checked_add(1)?,
    };
    let mut due = Vec::new();
    let mut k = first;
    while let Some(at) = c.slot(armed, k) {
        if at > now {
            break;
        }
        due.push(k);
        if due.len() > 1_000 {
            return None; // too long to walk; the property is checked elsewhere
        }
        k = k.checked_add(1)?;
    }
    Some(due)
}

/// Check everything `catch_up` promises for one call.
fn check_catch_up(
    c: &Cycle,
    armed: DateTime<Utc>,
    last_fired: Option<u64>,
    now: DateTime<Utc>,
) -> CatchUp {
    let r = c.catch_up(armed, last_fired, now);
    let budget = c.repetitions.map_or(u64::MAX, u64::from);
    if let Some(f) = r.fire {
        assert!(
            Some(f) > last_fired,
            "fired {f} again after {last_fired:?}: {r:?}"
        );
        assert!(f < budget, "fired {f} beyond budget {budget}");
        let at = c.slot(armed, f).expect("a fired slot exists");
        assert!(at <= now, "fired slot {f} at {at} is after now {now}");
        assert!(r.skipped <= f, "skipped more slots than precede {f}");
        assert_eq!(
            Some(f - r.skipped),
            last_fired.map_or(Some(0), |l| l.checked_add(1))
        );
    } else {
        assert_eq!(r.skipped, 0, "skipped without firing: {r:?}");
    }
    if let Some((k, at)) = r.next {
        assert!(k < budget, "next {k} beyond budget {budget}");
        assert!(at > now, "next slot {k} at {at} is not after now {now}");
        assert_eq!(c.slot(armed, k), Some(at));
        assert!(Some(k) > last_fired && Some(k) > r.fire);
        let expected = match r.fire {
            Some(f) => f + 1,
            None => last_fired.map_or(0, |l| l + 1),
        };
        assert_eq!(
            k, expected,
            "next is not the slot right after the fired (or last fired) one"
        );
    }
    if let Some(due) = due_by_walking(c, armed, last_fired, now) {
        assert_eq!(r.fire, due.last().copied(), "fires the latest due slot");
        assert_eq!(r.fire.map(|_| r.skipped + 1).unwrap_or(0), due.len() as u64);
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn duration_display_round_trips(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let d = IsoDuration(Duration::new(secs, nanos));
        let text = d.to_string();
        prop_assert_eq!(IsoDuration::parse(&text), Ok(d), "{}", text);
    }

    #[test]
    fn small_durations_round_trip(secs in 0u64..1_000_000, millis in 0u64..1_000) {
        let d = IsoDuration(Duration::from_secs(secs) + Duration::from_millis(millis));
        prop_assert_eq!(IsoDuration::parse(&d.to_string()), Ok(d));
    }

    #[test]
    fn written_components_add_up(
        w in 0u64..100, d in 0u64..100, h in 0u64..100, m in 0u64..100, s in 0u64..100, ms in 0u32..1_000,
    ) {
        let text = format!("P{w}W{d}DT{h}H{m}M{s}.{ms:03}S");
        let expected = Duration::from_secs(((w * 7 + d) * 24 + h) * 3_600 + m * 60 + s)
            + Duration::from_millis(u64::from(ms));
        let parsed = IsoDuration::parse(&text);
        prop_assert_eq!(parsed, Ok(IsoDuration(expected)));
        let canonical = IsoDuration(expected).to_string();
        prop_assert_eq!(IsoDuration::parse(&canonical), Ok(IsoDuration(expected)));
    }

    #[test]
    fn parsers_never_panic_and_refuse_with_timer_codes(s in "[PTRYMWDHS0-9.,:/+Z *?-]{0,24}|\\PC{0,24}") {
        let codes = [Code::TimerMalformed, Code::TimerUnsupported];
        if let Err(e) = IsoDuration::parse(&s) {
            prop_assert!(codes.contains(&e.code));
            prop_assert!(!e.message.is_empty());
        }
        if let Err(e) = Cycle::parse(&s) {
            prop_assert!(codes.contains(&e.code));
        }
        if let Err(e) = parse_date_time(&s) {
            prop_assert!(codes.contains(&e.code));
        }
    }

    #[test]
    fn parsed_cycles_round_trip_and_never_have_a_zero_interval(c in cycle()) {
        let text = c.to_string();
        let back = Cycle::parse(&text);
        prop_assert_eq!(back.as_ref().map(|b| b.interval), Ok(c.interval), "{}", text);
        prop_assert_eq!(back.as_ref().map(|b| b.repetitions), Ok(c.repetitions));
        prop_assert_eq!(back.map(|b| b.start), Ok(c.start));
    }

    #[test]
    fn catch_up_holds_anywhere(c in cycle(), armed in instant(), last in last_fired(), now in instant()) {
        check_catch_up(&c, armed, last, now);
    }

    #[test]
    fn catch_up_agrees_with_walking_the_grid(
        c in cycle(), armed in instant(), last in prop_oneof![Just(None), (0u64..40).prop_map(Some)],
        offset in -3i64..60, frac in 0u32..1_000,
    ) {
        if let Some(now) = near(&c, armed, offset, frac) {
            check_catch_up(&c, armed, last, now);
        }
    }

    #[test]
    fn slots_strictly_increase_within_the_budget(c in cycle(), armed in instant(), k in prop_oneof![0u64..100, any::<u64>()]) {
        let budget = c.repetitions.map_or(u64::MAX, u64::from);
        match (c.slot(armed, k), k.checked_add(1).and_then(|k1| c.slot(armed, k1))) {
            (Some(a), Some(b)) => prop_assert!(a < b, "slot {} at {} vs {}", k, a, b),
            (None, Some(_)) => prop_assert!(false, "slot {} missing but {} exists", k, k + 1),
            _ => {}
        }
        if c.slot(armed, k).is_some() {
            prop_assert!(k < budget);
        }
        if k >= budget {
            prop_assert_eq!(c.slot(armed, k), None);
        }
    }

    #[test]
    fn next_slot_after_is_the_first_slot_past_t(c in cycle(), armed in instant(), t in instant()) {
        match c.next_slot_after(armed, t) {
            Some((k, at)) => {
                prop_assert!(at > t);
                prop_assert_eq!(c.slot(armed, k), Some(at));
                if k > 0 {
                    let before = c.slot(armed, k - 1);
                    prop_assert!(before.is_some_and(|b| b <= t), "slot {} at {:?} is after {}", k - 1, before, t);
                }
            }
            None => {
                // No slot after t: slot 0 is absent, or at or before t (and so are the rest).
                if let Some(first) = c.slot(armed, 0) {
                    prop_assert!(first <= t);
                }
            }
        }
        let r = c.catch_up(armed, None, t);
        if r.fire.is_none() {
            prop_assert_eq!(r.next, c.next_slot_after(armed, t));
        }
    }

    #[test]
    fn a_running_schedule_fires_each_slot_at_most_once_and_spends_its_budget(
        c in cycle(), armed in instant(), steps in proptest::collection::vec((0i64..5, 0u32..1_000), 1..30),
    ) {
        let budget = c.repetitions.map_or(u64::MAX, u64::from);
        let mut last: Option<u64> = None;
        let mut accounted = 0u64;
        let mut now = armed;
        let mut offset = 0i64;
        for (jump, frac) in steps {
            offset += jump;
            let Some(t) = near(&c, armed, offset, frac) else { break };
            if t < now { continue; }
            now = t;
            let r = check_catch_up(&c, armed, last, now);
            if let Some(f) = r.fire {
                prop_assert!(Some(f) > last);
                accounted += r.skipped + 1;
                last = Some(f);
            }
            prop_assert!(accounted <= budget);
        }
        // Every slot up to the last one fired was either fired or skipped, exactly once.
        prop_assert_eq!(accounted, last.map_or(0, |l| l + 1));
    }
}
