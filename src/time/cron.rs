//! Recognising cron expressions where ISO 8601 is expected, so they are refused
//! as "well-formed but unsupported" rather than as garbage.
//!
//! Invariant: [`looks_like_cron`] only answers true for text that is shaped like
//! a Unix, Quartz/Spring or Jenkins cron line (5 to 7 whitespace-separated fields
//! of cron atoms) or a cron macro (`@daily`, `@every 5m`, ...). No ISO-8601
//! duration, date-time or repeating interval is ever shaped like that.

use super::TimeError;

/// Month and day-of-week names cron accepts in place of numbers.
const NAMES: [&str; 19] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", "SUN",
    "MON", "TUE", "WED", "THU", "FRI", "SAT",
];

/// The cron macros of Vixie cron and friends.
const MACROS: [&str; 9] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
    "@reboot",
    "@every",
];

/// Whether `text` is shaped like a cron expression.
pub(crate) fn looks_like_cron(text: &str) -> bool {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    if MACROS.iter().any(|m| {
        lower
            .strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
    }) {
        return true;
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    (5..=7).contains(&fields.len()) && fields.iter().all(|f| is_cron_field(f))
}

/// The error for a cron expression found where ISO 8601 was expected.
pub(crate) fn unsupported(original: &str, expected: &str) -> TimeError {
    TimeError::unsupported(format!(
        "`{}` looks like a cron expression: cron is not supported; write {expected}",
        original.trim()
    ))
}

/// A field is a comma-separated list of items; an item is a range or step of atoms.
fn is_cron_field(field: &str) -> bool {
    field.split(',').all(|item| {
        !item.is_empty()
            && item
                .split(['-', '/'])
                .all(|atom| !atom.is_empty() && is_cron_atom(atom))
    })
}

/// `*`, `?`, a number, a name, or Quartz's `L`, `W`, `LW`, `5L`, `15W`, `6#3`,
/// or Jenkins's hash `H`.
fn is_cron_atom(atom: &str) -> bool {
    let upper = atom.to_ascii_uppercase();
    if matches!(upper.as_str(), "*" | "?" | "L" | "W" | "LW" | "H")
        || NAMES.contains(&upper.as_str())
    {
        return true;
    }
    let digits = upper.trim_end_matches(['L', 'W']);
    if !digits.is_empty()
        && digits.len() + 1 >= upper.len()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return true;
    }
    match upper.split_once('#') {
        Some((day, nth)) => {
            let day_ok = NAMES.contains(&day)
                || (!day.is_empty() && day.bytes().all(|b| b.is_ascii_digit()));
            day_ok && !nth.is_empty() && nth.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_cron;

    #[test]
    fn unix_quartz_and_jenkins_lines_are_cron() {
        for s in [
            "0 0 * * *",
            "*/5 * * * *",
            "*/5 * * * * ?",
            "0 0 12 ? * WED",
            "0 15 10 ? * 6L 2026",
            "0 0 9 * * MON-FRI",
            "0 0/5 14,18 * * ?",
            "0 15 10 ? * 6#3",
            "0 0 12 LW * ?",
            "H/15 * * * *",
            "  0 0 1 1 *  ",
            "@daily",
            "@every 5m",
            "@HOURLY",
        ] {
            assert!(looks_like_cron(s), "{s}");
        }
    }

    #[test]
    fn iso_text_and_prose_are_not_cron() {
        for s in [
            "PT1H",
            "R/PT1H",
            "R3/2026-01-01T00:00:00Z/PT1H",
            "2026-01-01T00:00:00Z",
            "2026-01-01 00:00:00",
            "every day at noon please",
            "0 0 * *",
            "0 0 * * * * * *",
            "@dailyish",
            "",
        ] {
            assert!(!looks_like_cron(s), "{s}");
        }
    }
}
