//! Text and byte renderings of column values, Kafka timestamps, and trace context detection.
//!
//! # Text rendering (keys, event ids, headers, topic placeholders)
//! | value | text |
//! |---|---|
//! | `Text` | as is |
//! | `Int`, `UInt` | decimal (`-42`, `18446744073709551615`) |
//! | `Float`, `Double` | Rust's shortest round-trip decimal (`1.5`, `NaN`, `inf`) |
//! | `Decimal` | its exact decimal string |
//! | `Json` | compact JSON text |
//! | `DateTime` | ISO-8601 without zone, `2024-05-06T07:08:09` (`.ffffff` when micros ≠ 0) |
//! | `Date` | `2024-05-06` |
//! | `Time` | `[-]HH:MM:SS[.ffffff]` (hours may exceed 23) |
//! | `Timestamp` | RFC 3339 UTC, `2024-05-06T07:08:09Z` (`.ffffff` when micros ≠ 0) |
//! | `Bytes` | per [`BinaryEncoding`]: UTF-8 text, lowercase hex, canonical UUID, standard Base64 (Debezium's form of a binary id), or raw bytes |
//! | `Vector` | raw bytes only (its floats little-endian, as MySQL stores them); no text form |
//! | `Null` | never rendered: a NULL required column is an error |
//! | `UndecodableText` | never rendered: always an error |

use std::borrow::Cow;
use std::fmt::Write as _;

use outbox_binlog::{DateTime, Value};

use crate::config::BinaryEncoding;
use crate::error::RoutingErrorKind;

/// Why `value` cannot serve as `usage` (e.g. "a partition (use an integer column)"):
/// undecodable text keeps its charset and length, any other value is named by its type.
pub(crate) fn unusable_value_error(value: &Value, usage: &'static str) -> RoutingErrorKind {
    match value {
        Value::UndecodableText { bytes, charset } => RoutingErrorKind::UndecodableText {
            charset: charset.clone(),
            length: bytes.len(),
        },
        other => RoutingErrorKind::UnsupportedType {
            value_type: value_type_name(other),
            usage,
        },
    }
}

/// SQL-ish name of a value's type, for error messages.
pub(crate) fn value_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NULL",
        Value::Int(_) => "signed integer",
        Value::UInt(_) => "unsigned integer",
        Value::Float(_) => "FLOAT",
        Value::Double(_) => "DOUBLE",
        Value::Decimal(_) => "DECIMAL",
        Value::Text(_) => "text",
        Value::UndecodableText { .. } => "undecodable text",
        Value::Bytes(_) => "binary",
        Value::Json(_) => "JSON",
        Value::Vector(_) => "VECTOR",
        Value::DateTime(_) => "DATETIME",
        Value::Date(_) => "DATE",
        Value::Time { .. } => "TIME",
        Value::Timestamp { .. } => "TIMESTAMP",
    }
}

/// Renders a non-NULL value as text (see the module docs for each type).
///
/// `encoding` only matters for binary values; [`BinaryEncoding::Raw`] is treated as
/// [`BinaryEncoding::Utf8`] here, because text is required.
pub fn render_value_text(
    value: &Value,
    encoding: BinaryEncoding,
) -> Result<Cow<'_, str>, RoutingErrorKind> {
    Ok(match value {
        Value::Null => return Err(RoutingErrorKind::NullColumn),
        Value::UndecodableText { bytes, charset } => {
            return Err(RoutingErrorKind::UndecodableText {
                charset: charset.clone(),
                length: bytes.len(),
            })
        }
        Value::Vector(_) => return Err(unusable_value_error(value, "text")),
        Value::Text(text) => Cow::Borrowed(text.as_str()),
        Value::Decimal(text) => Cow::Borrowed(text.as_str()),
        Value::Int(number) => Cow::Owned(number.to_string()),
        Value::UInt(number) => Cow::Owned(number.to_string()),
        Value::Float(number) => Cow::Owned(number.to_string()),
        Value::Double(number) => Cow::Owned(number.to_string()),
        Value::Json(document) => Cow::Borrowed(document.as_str()),
        Value::DateTime(datetime) => Cow::Owned(format_datetime(datetime)),
        Value::Date(date) => Cow::Owned(format!(
            "{:04}-{:02}-{:02}",
            date.year, date.month, date.day
        )),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            let mut text = String::with_capacity(16);
            if *negative {
                text.push('-');
            }
            let _ = write!(text, "{hours:02}:{minutes:02}:{seconds:02}");
            push_micros(&mut text, *micros);
            Cow::Owned(text)
        }
        Value::Timestamp {
            unix_seconds,
            micros,
        } => Cow::Owned(format_unix_timestamp(*unix_seconds, *micros)),
        Value::Bytes(bytes) => match encoding {
            BinaryEncoding::Utf8 | BinaryEncoding::Raw => {
                Cow::Borrowed(std::str::from_utf8(bytes).map_err(|_| RoutingErrorKind::NotUtf8)?)
            }
            BinaryEncoding::Hex => Cow::Owned(hex(bytes)),
            BinaryEncoding::Base64 => Cow::Owned(crate::connect_json::base64(bytes)),
            BinaryEncoding::Uuid => Cow::Owned(uuid_text(bytes)?),
        },
    })
}

/// Renders a non-NULL value as bytes: binary values with [`BinaryEncoding::Raw`] as they
/// are, everything else as the UTF-8 bytes of [`render_value_text`].
pub fn render_value_bytes(
    value: &Value,
    encoding: BinaryEncoding,
) -> Result<Cow<'_, [u8]>, RoutingErrorKind> {
    match (value, encoding) {
        (Value::Bytes(bytes), BinaryEncoding::Raw) => Ok(Cow::Borrowed(bytes.as_slice())),
        (Value::Vector(floats), BinaryEncoding::Raw) => Ok(Cow::Owned(Value::vector_bytes(floats))),
        _ => Ok(match render_value_text(value, encoding)? {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        }),
    }
}

/// Lowercase hexadecimal, two characters per byte.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    text
}

/// Canonical UUID text of exactly 16 bytes.
fn uuid_text(bytes: &[u8]) -> Result<String, RoutingErrorKind> {
    if bytes.len() != 16 {
        return Err(RoutingErrorKind::NotUuid {
            length: bytes.len(),
        });
    }
    let digits = hex(bytes);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &digits[0..8],
        &digits[8..12],
        &digits[12..16],
        &digits[16..20],
        &digits[20..32]
    ))
}

/// Appends `.ffffff` when `micros` is not zero.
fn push_micros(text: &mut String, micros: u32) {
    if micros != 0 {
        let _ = write!(text, ".{micros:06}");
    }
}

/// ISO-8601 without zone: `YYYY-MM-DDTHH:MM:SS[.ffffff]`, fields as stored (zero dates too).
fn format_datetime(datetime: &DateTime) -> String {
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        datetime.year,
        datetime.month,
        datetime.day,
        datetime.hour,
        datetime.minute,
        datetime.second
    );
    push_micros(&mut text, datetime.micros);
    text
}

/// RFC 3339 UTC text of a Unix time.
fn format_unix_timestamp(unix_seconds: i64, micros: u32) -> String {
    let days = unix_seconds.div_euclid(86_400);
    let second_of_day = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        year,
        month,
        day,
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    );
    push_micros(&mut text, micros);
    text.push('Z');
    text
}

/// ISO-8601 UTC text of a Unix time with exactly `width` fraction digits (none for 0), as
/// Debezium's `ZonedTimestamp.toIsoString` writes a `TIMESTAMP(width)` column.
pub(crate) fn format_unix_timestamp_width(unix_seconds: i64, micros: u32, width: u8) -> String {
    let mut text = format_unix_timestamp(unix_seconds, 0);
    text.pop();
    if width > 0 {
        let digits = format!("{micros:06}000");
        text.push('.');
        text.push_str(&digits[..usize::from(width)]);
    }
    text.push('Z');
    text
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = if year >= 0 { year } else { year - 399 } / 400;
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = if shifted >= 0 {
        shifted
    } else {
        shifted - 146_096
    } / 146_097;
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Number of days in a month of the proleptic Gregorian calendar.
fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        _ => 0,
    }
}

/// Milliseconds since the epoch of a DATETIME interpreted as UTC.
fn datetime_millis(datetime: &DateTime) -> Result<i64, RoutingErrorKind> {
    Ok(datetime_micros(datetime)?.div_euclid(1000))
}

/// Microseconds since the epoch of a DATETIME interpreted as UTC; a zero or impossible
/// date is an error.
pub(crate) fn datetime_micros(datetime: &DateTime) -> Result<i64, RoutingErrorKind> {
    let valid = (1..=12).contains(&datetime.month)
        && datetime.day >= 1
        && datetime.day <= days_in_month(datetime.year, datetime.month)
        && datetime.hour < 24
        && datetime.minute < 60
        && datetime.second < 60
        && datetime.micros < 1_000_000;
    if !valid {
        return Err(RoutingErrorKind::InvalidTimestamp {
            reason: format!(
                "{} is not a calendar date and time",
                format_datetime(datetime)
            ),
        });
    }
    let days = days_from_civil(
        i64::from(datetime.year),
        u32::from(datetime.month),
        u32::from(datetime.day),
    );
    let seconds = days * 86_400
        + i64::from(datetime.hour) * 3600
        + i64::from(datetime.minute) * 60
        + i64::from(datetime.second);
    Ok(seconds * 1_000_000 + i64::from(datetime.micros))
}

/// Kafka timestamp (milliseconds since the epoch) of a timestamp column value:
/// DATETIME/DATE as UTC, TIMESTAMP as is, integers as epoch milliseconds.
/// `Ok(None)` for NULL. Times before 1970 are errors (Kafka has no negative timestamps).
pub(crate) fn timestamp_millis(value: &Value) -> Result<Option<i64>, RoutingErrorKind> {
    let millis = match value {
        Value::Null => return Ok(None),
        Value::DateTime(datetime) | Value::Date(datetime) => datetime_millis(datetime)?,
        Value::Timestamp {
            unix_seconds,
            micros,
        } => unix_seconds
            .checked_mul(1000)
            .and_then(|millis| millis.checked_add(i64::from(*micros / 1000)))
            .ok_or_else(|| RoutingErrorKind::InvalidTimestamp {
                reason: format!("TIMESTAMP {unix_seconds} seconds is out of range"),
            })?,
        Value::Int(millis) => *millis,
        Value::UInt(millis) => {
            i64::try_from(*millis).map_err(|_| RoutingErrorKind::InvalidTimestamp {
                reason: format!("{millis} milliseconds is out of range"),
            })?
        }
        other => {
            return Err(unusable_value_error(
                other,
                "the timestamp (use DATETIME, TIMESTAMP, DATE or integer epoch milliseconds)",
            ))
        }
    };
    if millis < 0 {
        return Err(RoutingErrorKind::InvalidTimestamp {
            reason: format!(
                "{millis} ms is before 1970-01-01, Kafka timestamps cannot be negative"
            ),
        });
    }
    Ok(Some(millis))
}

/// True for a W3C trace context `traceparent` of version 00:
/// `00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex>`, ids not all zero.
pub(crate) fn is_w3c_traceparent(text: &str) -> bool {
    let bytes = text.as_bytes();
    let is_hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let not_all_zero = |range: std::ops::Range<usize>| bytes[range].iter().any(|b| *b != b'0');
    bytes.len() == 55
        && bytes.starts_with(b"00-")
        && bytes[35] == b'-'
        && bytes[52] == b'-'
        && is_hex(3..35)
        && is_hex(36..52)
        && is_hex(53..55)
        && not_all_zero(3..35)
        && not_all_zero(36..52)
}

/// The W3C `traceparent` held by a span context column: the whole (trimmed) value, or a
/// `traceparent=...` line of a Java-properties span context as Debezium's
/// `tracingspancontext` stores it.
pub(crate) fn find_traceparent(text: &str) -> Option<&str> {
    let trimmed = text.trim();
    if is_w3c_traceparent(trimmed) {
        return Some(trimmed);
    }
    text.lines().find_map(|line| {
        let candidate = line.trim().strip_prefix("traceparent=")?.trim();
        is_w3c_traceparent(candidate).then_some(candidate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datetime(year: u16, month: u8, day: u8, hour: u8, minute: u8, second: u8) -> DateTime {
        DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros: 0,
        }
    }

    #[test]
    fn civil_round_trip_over_many_days() {
        for days in (-800_000..800_000).step_by(97) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn datetime_as_utc_millis() {
        let mut value = datetime(2024, 2, 29, 23, 59, 58);
        value.micros = 123_999;
        assert_eq!(
            timestamp_millis(&Value::DateTime(value)),
            Ok(Some(1_709_251_198_123))
        );
        assert!(timestamp_millis(&Value::DateTime(datetime(2023, 2, 29, 0, 0, 0))).is_err());
        assert!(timestamp_millis(&Value::DateTime(datetime(0, 0, 0, 0, 0, 0))).is_err());
        assert!(timestamp_millis(&Value::DateTime(datetime(1969, 12, 31, 23, 59, 59))).is_err());
    }

    #[test]
    fn text_renderings() {
        let cases = [
            (Value::Int(-42), "-42"),
            (Value::UInt(u64::MAX), "18446744073709551615"),
            (Value::Double(1.5), "1.5"),
            (Value::Decimal("-12.3400".into()), "-12.3400"),
            (
                Value::Json(serde_json::json!({"a": [1, 2]}).into()),
                r#"{"a":[1,2]}"#,
            ),
            (
                Value::DateTime(datetime(2024, 5, 6, 7, 8, 9)),
                "2024-05-06T07:08:09",
            ),
            (Value::Date(datetime(2024, 5, 6, 0, 0, 0)), "2024-05-06"),
            (
                Value::Time {
                    negative: true,
                    hours: 123,
                    minutes: 4,
                    seconds: 5,
                    micros: 6,
                },
                "-123:04:05.000006",
            ),
            (
                Value::Timestamp {
                    unix_seconds: 1_715_000_000,
                    micros: 250_000,
                },
                "2024-05-06T12:53:20.250000Z",
            ),
        ];
        for (value, text) in cases {
            assert_eq!(
                render_value_text(&value, BinaryEncoding::Utf8).unwrap(),
                text
            );
        }
    }

    #[test]
    fn binary_encodings() {
        let bytes = Value::Bytes((0u8..16).collect());
        assert_eq!(
            render_value_text(&bytes, BinaryEncoding::Uuid).unwrap(),
            "00010203-0405-0607-0809-0a0b0c0d0e0f"
        );
        assert_eq!(
            render_value_text(&bytes, BinaryEncoding::Hex).unwrap(),
            "000102030405060708090a0b0c0d0e0f"
        );
        assert_eq!(
            render_value_bytes(&Value::Bytes(vec![0xff, 0]), BinaryEncoding::Raw).unwrap(),
            &[0xff, 0][..]
        );
        assert_eq!(
            render_value_text(&Value::Bytes(vec![0xff]), BinaryEncoding::Utf8),
            Err(RoutingErrorKind::NotUtf8)
        );
        assert_eq!(
            render_value_text(&Value::Bytes(vec![1; 15]), BinaryEncoding::Uuid),
            Err(RoutingErrorKind::NotUuid { length: 15 })
        );
    }

    #[test]
    fn traceparent_detection() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(is_w3c_traceparent(good));
        assert_eq!(find_traceparent(&format!(" {good}\n")), Some(good));
        assert_eq!(
            find_traceparent(&format!("#Mon Jan 01\ntraceparent={good}\ntracestate=x\n")),
            Some(good)
        );
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "uber-trace-id=abc",
        ] {
            assert_eq!(find_traceparent(bad), None, "{bad}");
        }
    }
}
