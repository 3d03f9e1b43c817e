//! The audit window's bounds: UTC times as the poll session reads its columns.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use outbox_router::{civil_from_days, days_from_civil};

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// A point in time in UTC, in microseconds since the epoch. The audit compares it with the
/// outbox table's timestamp column on a session whose `time_zone` is UTC, so a `TIMESTAMP`
/// column compares as the instant it is and a `DATETIME` column as its digits read in UTC
/// (as the router, and Debezium, read a `DATETIME` for the record's timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime {
    /// Microseconds since 1970-01-01 00:00:00 UTC.
    micros: i64,
}

impl UtcTime {
    /// The time `micros` microseconds after the epoch.
    pub fn from_unix_micros(micros: i64) -> Self {
        Self { micros }
    }

    /// The current time of this machine's clock.
    pub fn now() -> Self {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
            });
        Self { micros }
    }

    /// `YYYY-MM-DD HH:MM:SS` with an optional fraction of up to six digits; a `T` may stand
    /// for the space and a `Z` may end it (it is UTC either way). `Err` says what form is
    /// expected: the server would read anything else as a zero date.
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "`{text}` is not a UTC time `YYYY-MM-DD HH:MM:SS[.ffffff]`, e.g. `2026-12-06 17:30:00`"
            )
        };
        let trimmed = text.strip_suffix('Z').unwrap_or(text);
        let (whole, fraction) = match trimmed.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (trimmed, None),
        };
        let bytes = whole.as_bytes();
        let shape_ok = bytes.len() == 19
            && bytes.iter().enumerate().all(|(index, byte)| match index {
                4 | 7 => *byte == b'-',
                10 => *byte == b' ' || *byte == b'T',
                13 | 16 => *byte == b':',
                _ => byte.is_ascii_digit(),
            });
        if !shape_ok {
            return Err(expected());
        }
        let number = |range: std::ops::Range<usize>| -> i64 {
            whole[range]
                .bytes()
                .fold(0, |sum, digit| sum * 10 + i64::from(digit - b'0'))
        };
        let (year, month, day) = (number(0..4), number(5..7), number(8..10));
        let (hour, minute, second) = (number(11..13), number(14..16), number(17..19));
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(expected());
        }
        let fraction_micros = match fraction {
            None => 0,
            Some(digits)
                if (1..=6).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                let value: i64 = digits.parse().map_err(|_| expected())?;
                value * 10_i64.pow(6 - digits.len() as u32)
            }
            Some(_) => return Err(expected()),
        };
        let days = days_from_civil(year, month as u32, day as u32);
        // `days_from_civil` rolls 2026-02-31 over into March: refuse such dates.
        if civil_from_days(days) != (year, month as u32, day as u32) {
            return Err(expected());
        }
        let seconds = days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
        Ok(Self {
            micros: seconds * MICROS_PER_SECOND + fraction_micros,
        })
    }

    /// Milliseconds since the epoch, rounded down (Kafka's timestamps).
    pub fn unix_millis(self) -> i64 {
        self.micros.div_euclid(1000)
    }

    /// This time minus `duration` (saturating).
    pub fn minus(self, duration: std::time::Duration) -> Self {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Self {
            micros: self.micros.saturating_sub(micros),
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS.ffffff`: the literal the window's SQL compares with.
impl fmt::Display for UtcTime {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.micros.div_euclid(MICROS_PER_SECOND);
        let micros = self.micros.rem_euclid(MICROS_PER_SECOND);
        let days = seconds.div_euclid(SECONDS_PER_DAY);
        let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        write!(
            formatter,
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{micros:06}",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_utc_times() {
        let time = UtcTime::parse("2026-12-06 17:30:05").unwrap();
        assert_eq!(time.unix_millis(), 1_796_578_205_000);
        assert_eq!(time.to_string(), "2026-12-06 17:30:05.000000");
        let precise = UtcTime::parse("2026-12-06T17:30:05.25Z").unwrap();
        assert_eq!(precise.unix_millis(), 1_796_578_205_250);
        assert_eq!(precise.to_string(), "2026-12-06 17:30:05.250000");
        assert_eq!(
            UtcTime::parse("1970-01-01 00:00:00").unwrap(),
            UtcTime::from_unix_micros(0)
        );
    }

    #[test]
    fn refuses_what_the_server_would_read_as_a_zero_date() {
        for text in [
            "2026-12-06",
            "2026-12-06 17:30",
            "06.12.2026 17:30:00",
            "2026-02-31 00:00:00",
            "2026-12-06 24:00:00",
            "2026-12-06 17:30:00.1234567",
            "2026-12-06 17:30:00.",
            "yesterday",
        ] {
            let error = UtcTime::parse(text).unwrap_err();
            assert!(error.contains("YYYY-MM-DD HH:MM:SS"), "{text}: {error}");
        }
    }
}
