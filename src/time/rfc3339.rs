//! Instants as text (the snapshot's): exactly what chrono's serde writes for a
//! `DateTime<Utc>` (RFC 3339, `SecondsFormat::AutoSi`, `Z`), written into a
//! buffer on the stack and handed to the serializer as one string.
//!
//! chrono writes through `collect_str`: `core::fmt` calls a character or two
//! at a time, each escaped and copied on its own by serde_json. A snapshot
//! holds several instants (the start, each task's `since`, each park's due)
//! and is written on every commit, so that was a visible part of a step's
//! cost (session 32, issue 36).
//!
//! Invariants:
//! - the text is byte for byte chrono's (a test compares them over many
//!   instants, leap seconds and every fraction length included), so stored
//!   snapshots read back the same and old readers read new snapshots;
//! - years outside 0..=9999 (which chrono writes with a sign) go through
//!   chrono itself;
//! - only writing changes: snapshots are read by chrono's own deserializer.

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::{Serialize, Serializer};

/// The longest text: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const MAX: usize = 30;

/// Serialize an instant (`#[serde(serialize_with = "…::write")]`).
pub(crate) fn write<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; MAX];
    match format(t, &mut buf).and_then(|n| std::str::from_utf8(&buf[..n]).ok()) {
        Some(text) => s.serialize_str(text),
        None => t.serialize(s),
    }
}

/// Serialize an optional instant as `Option<DateTime<Utc>>` would be.
pub(crate) fn write_opt<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    struct Instant<'a>(&'a DateTime<Utc>);
    impl Serialize for Instant<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            write(self.0, s)
        }
    }
    match t {
        Some(t) => s.serialize_some(&Instant(t)),
        None => s.serialize_none(),
    }
}

/// The text's length in `buf`, or `None` for a year chrono writes signed.
fn format(t: &DateTime<Utc>, buf: &mut [u8; MAX]) -> Option<usize> {
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return None;
    }
    let (mut sec, mut nano) = (t.second(), t.nanosecond());
    if nano >= 1_000_000_000 {
        // A leap second: chrono writes it as second 60.
        sec += 1;
        nano -= 1_000_000_000;
    }
    let year = year as u32;
    let two = |buf: &mut [u8; MAX], at: usize, n: u32| {
        buf[at] = b'0' + (n / 10 % 10) as u8;
        buf[at + 1] = b'0' + (n % 10) as u8;
    };
    two(buf, 0, year / 100);
    two(buf, 2, year % 100);
    buf[4] = b'-';
    two(buf, 5, t.month());
    buf[7] = b'-';
    two(buf, 8, t.day());
    buf[10] = b'T';
    two(buf, 11, t.hour());
    buf[13] = b':';
    two(buf, 14, t.minute());
    buf[16] = b':';
    two(buf, 17, sec);
    let mut n = 19;
    let (digits, mut frac) = if nano == 0 {
        (0, 0)
    } else if nano % 1_000_000 == 0 {
        (3, nano / 1_000_000)
    } else if nano % 1_000 == 0 {
        (6, nano / 1_000)
    } else {
        (9, nano)
    };
    if digits > 0 {
        buf[n] = b'.';
        for i in (0..digits).rev() {
            buf[n + 1 + i] = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        n += 1 + digits;
    }
    buf[n] = b'Z';
    Some(n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};

    #[derive(Serialize)]
    struct Ours {
        #[serde(serialize_with = "write")]
        at: DateTime<Utc>,
        #[serde(serialize_with = "write_opt")]
        maybe: Option<DateTime<Utc>>,
    }

    #[derive(Serialize)]
    struct Chrono {
        at: DateTime<Utc>,
        maybe: Option<DateTime<Utc>>,
    }

    fn same(at: DateTime<Utc>) {
        let ours = serde_json::to_string(&Ours {
            at,
            maybe: Some(at),
        })
        .unwrap();
        let theirs = serde_json::to_string(&Chrono {
            at,
            maybe: Some(at),
        })
        .unwrap();
        assert_eq!(ours, theirs, "{at:?}");
    }

    #[test]
    fn instants_are_written_as_chrono_writes_them() {
        // Every fraction length, both ends of a day and of the 4-digit years.
        let nanos = [
            0,
            1,
            999,
            1_000,
            120_000,
            999_999,
            1_000_000,
            7_000_000,
            100_000_000,
            123_456_789,
            999_999_999,
        ];
        for (y, mo, d, h, mi, s) in [
            (2026, 12, 7, 23, 59, 59),
            (1970, 1, 1, 0, 0, 0),
            (0, 1, 1, 0, 0, 0),
            (9999, 12, 31, 23, 59, 59),
            (2000, 2, 29, 12, 30, 5),
            (1, 10, 9, 8, 7, 6),
        ] {
            for nano in nanos {
                let at = NaiveDate::from_ymd_opt(y, mo, d)
                    .and_then(|d| d.and_hms_nano_opt(h, mi, s, nano))
                    .unwrap();
                same(Utc.from_utc_datetime(&at));
            }
        }
        // A spread of ordinary instants, millisecond and nanosecond ones.
        let mut x: i64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ms = x.rem_euclid(253_402_300_799_000);
            same(DateTime::from_timestamp_millis(ms).unwrap());
            let ns = x.rem_euclid(i64::MAX);
            same(DateTime::from_timestamp_nanos(ns));
        }
    }

    #[test]
    fn leap_seconds_and_signed_years_too() {
        for nano in [1_000_000_000, 1_500_000_000, 1_000_000_001, 1_999_999_999] {
            let at = NaiveDate::from_ymd_opt(2016, 12, 31)
                .and_then(|d| d.and_hms_nano_opt(23, 59, 59, nano))
                .unwrap();
            same(Utc.from_utc_datetime(&at));
        }
        for y in [-1, -9999, 10_000, 262_000] {
            let at = NaiveDate::from_ymd_opt(y, 6, 1)
                .and_then(|d| d.and_hms_milli_opt(1, 2, 3, 4))
                .unwrap();
            same(Utc.from_utc_datetime(&at));
        }
        let none = serde_json::to_string(&Ours {
            at: DateTime::UNIX_EPOCH,
            maybe: None,
        })
        .unwrap();
        assert_eq!(none, r#"{"at":"1970-01-01T00:00:00Z","maybe":null}"#);
    }
}
