//! A claimed row, read through the client protocol, as the router's row image: the same
//! typed values the binlog decoder yields for the same columns, so one router serves both
//! sources.
//!
//! The claim runs on a session with `time_zone = '+00:00'` ([`crate::SESSION_SETUP`]), so a
//! `TIMESTAMP` comes back in UTC and becomes the binlog's seconds since the epoch. A column
//! type the conversion does not know is an error naming the column and its type, never a
//! guess (invariant 4b's rule for the binlog decoder, kept here).

use std::sync::Arc;

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::{Column, Row as SqlRow, Value as SqlValue};
use outbox_binlog::{
    BinlogPosition, ColumnNames, ColumnTypes, DateTime, JsonText, Row, RowChange, RowOperation,
    SqlType, TableName, Value,
};

/// The `binary` character set: bytes, not text.
const BINARY_CHARSET: u16 = 63;

/// The column names of a claim's result, shared by every row of it.
pub fn column_names(columns: &[Column]) -> ColumnNames {
    columns
        .iter()
        .map(|column| column.name_str().into_owned())
        .collect::<Vec<_>>()
        .into()
}

/// The SQL types of a result's columns as the server describes them (type code, flags,
/// decimals, character set), in the binlog's terms: the row images carry them, so the
/// router types polled rows as it types the binlog's.
pub fn column_types(columns: &[Column]) -> ColumnTypes {
    columns.iter().map(column_type_of).collect()
}

fn column_type_of(column: &Column) -> outbox_binlog::ColumnType {
    let flags = column.flags();
    let unsigned = flags.contains(ColumnFlags::UNSIGNED_FLAG);
    let fsp = column.decimals().min(6);
    let integer = |bytes| SqlType::Integer { bytes, unsigned };
    let sql_type = match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY => integer(1),
        ColumnType::MYSQL_TYPE_SHORT => integer(2),
        ColumnType::MYSQL_TYPE_INT24 => integer(3),
        ColumnType::MYSQL_TYPE_LONG => integer(4),
        ColumnType::MYSQL_TYPE_LONGLONG => integer(8),
        ColumnType::MYSQL_TYPE_FLOAT => SqlType::Float,
        ColumnType::MYSQL_TYPE_DOUBLE => SqlType::Double,
        ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => {
            // The display length counts the digits, a point when there are decimals, and
            // a sign unless the column is unsigned.
            let scale = column.decimals();
            let extra = u32::from(scale > 0) + u32::from(!unsigned);
            let precision = column.column_length().saturating_sub(extra);
            SqlType::Decimal {
                precision: u8::try_from(precision).unwrap_or(u8::MAX),
                scale,
            }
        }
        ColumnType::MYSQL_TYPE_YEAR => SqlType::Year,
        ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE => SqlType::Date,
        ColumnType::MYSQL_TYPE_TIME | ColumnType::MYSQL_TYPE_TIME2 => SqlType::Time { fsp },
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => {
            SqlType::DateTime { fsp }
        }
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => {
            SqlType::Timestamp { fsp }
        }
        ColumnType::MYSQL_TYPE_JSON => SqlType::Json,
        // The display length of a BIT(n) is n.
        ColumnType::MYSQL_TYPE_BIT => SqlType::Bit {
            length: u16::try_from(column.column_length()).unwrap_or(64),
        },
        ColumnType::MYSQL_TYPE_ENUM | ColumnType::MYSQL_TYPE_SET => SqlType::Text,
        ColumnType::MYSQL_TYPE_STRING
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB => {
            if column.character_set() == BINARY_CHARSET {
                SqlType::Binary
            } else {
                SqlType::Text
            }
        }
        _ => SqlType::Unknown,
    };
    outbox_binlog::ColumnType {
        sql_type,
        nullable: !flags.contains(ColumnFlags::NOT_NULL_FLAG),
    }
}

/// `row` as the router's row image with `names` (its first `names.len()` columns) and their
/// `types` (from [`column_types`]); `Err` names the column that does not convert and why.
pub fn row_image(row: SqlRow, names: &ColumnNames, types: &ColumnTypes) -> Result<Row, String> {
    let columns: Arc<[Column]> = row.columns();
    let values = row
        .unwrap_raw()
        .into_iter()
        .zip(columns.iter())
        .take(names.len())
        .map(|(value, column)| {
            column_value(value.unwrap_or(SqlValue::NULL), column).map_err(|problem| {
                format!(
                    "column `{}` ({:?}): {problem}",
                    column.name_str(),
                    column.column_type()
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let types = if types.len() == names.len() {
        types.clone()
    } else {
        types.iter().take(names.len()).copied().collect()
    };
    Ok(Row {
        columns: names.clone(),
        values,
        types: Some(types),
    })
}

/// A row read through the client protocol as the INSERT the router routes: it has no
/// binlog event, so no position, and `event_timestamp` (seconds) stands for the event's
/// time (the read's).
pub fn sql_row_change(table: Arc<TableName>, image: Row, event_timestamp: u32) -> RowChange {
    RowChange {
        table,
        operation: RowOperation::Insert,
        before: None,
        after: Some(image),
        event_timestamp,
        event_position: BinlogPosition::new(String::new(), 0),
        transaction_gtid: None,
        in_xa_transaction: false,
    }
}

/// One value of the binary protocol as the binlog decoder would type it.
fn column_value(value: SqlValue, column: &Column) -> Result<Value, String> {
    if value == SqlValue::NULL {
        return Ok(Value::Null);
    }
    // YEAR carries the unsigned flag; the binlog decoder types it signed.
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG)
        && column.column_type() != ColumnType::MYSQL_TYPE_YEAR;
    let binary = column.character_set() == BINARY_CHARSET;
    match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY
        | ColumnType::MYSQL_TYPE_SHORT
        | ColumnType::MYSQL_TYPE_INT24
        | ColumnType::MYSQL_TYPE_LONG
        | ColumnType::MYSQL_TYPE_LONGLONG
        | ColumnType::MYSQL_TYPE_YEAR => match value {
            SqlValue::Int(int) if unsigned => u64::try_from(int)
                .map(Value::UInt)
                .map_err(|_| format!("negative value {int} in an unsigned column")),
            SqlValue::Int(int) => Ok(Value::Int(int)),
            SqlValue::UInt(uint) if unsigned => Ok(Value::UInt(uint)),
            SqlValue::UInt(uint) => i64::try_from(uint)
                .map(Value::Int)
                .map_err(|_| format!("value {uint} out of range of a signed column")),
            other => Err(unexpected(&other)),
        },
        ColumnType::MYSQL_TYPE_FLOAT => match value {
            SqlValue::Float(float) => Ok(Value::Float(float)),
            other => Err(unexpected(&other)),
        },
        ColumnType::MYSQL_TYPE_DOUBLE => match value {
            SqlValue::Double(double) => Ok(Value::Double(double)),
            other => Err(unexpected(&other)),
        },
        ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => {
            text_of(value).map(Value::Decimal)
        }
        ColumnType::MYSQL_TYPE_BIT => match value {
            SqlValue::Bytes(bytes) if bytes.len() <= 8 => Ok(Value::UInt(
                bytes
                    .iter()
                    .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte)),
            )),
            other => Err(unexpected(&other)),
        },
        ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_STRING
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
        | ColumnType::MYSQL_TYPE_ENUM
        | ColumnType::MYSQL_TYPE_SET => match value {
            SqlValue::Bytes(bytes) if binary => Ok(Value::Bytes(bytes)),
            // The session's character set is utf8mb4: the server converted the text.
            SqlValue::Bytes(bytes) => Ok(match String::from_utf8(bytes) {
                Ok(text) => Value::Text(text),
                Err(error) => Value::UndecodableText {
                    bytes: error.into_bytes(),
                    charset: column.character_set().to_string(),
                },
            }),
            other => Err(unexpected(&other)),
        },
        ColumnType::MYSQL_TYPE_JSON => {
            text_of(value).map(|text| Value::Json(JsonText::new(compact_mysql_json(&text))))
        }
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => {
            date_time(value).map(Value::DateTime)
        }
        ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE => {
            date_time(value).map(Value::Date)
        }
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => {
            let utc = date_time(value)?;
            let days = outbox_router::days_from_civil(
                i64::from(utc.year),
                u32::from(utc.month),
                u32::from(utc.day),
            );
            Ok(Value::Timestamp {
                unix_seconds: days * 86_400
                    + i64::from(utc.hour) * 3_600
                    + i64::from(utc.minute) * 60
                    + i64::from(utc.second),
                micros: utc.micros,
            })
        }
        ColumnType::MYSQL_TYPE_TIME | ColumnType::MYSQL_TYPE_TIME2 => match value {
            SqlValue::Time(negative, days, hours, minutes, seconds, micros) => Ok(Value::Time {
                negative,
                hours: days * 24 + u32::from(hours),
                minutes,
                seconds,
                micros,
            }),
            other => Err(unexpected(&other)),
        },
        other => Err(format!(
            "poll mode does not read columns of type {other:?}; leave it out of the outbox table or use [source] mode = \"binlog\""
        )),
    }
}

/// A DATETIME, DATE or TIMESTAMP of the binary protocol.
fn date_time(value: SqlValue) -> Result<DateTime, String> {
    match value {
        SqlValue::Date(year, month, day, hour, minute, second, micros) => Ok(DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        }),
        other => Err(unexpected(&other)),
    }
}

/// A MySQL `JSON` value as SQL gives it (`{"a": 1, "b": [1, 2]}`: members in storage
/// order, a space after each `:` and `,`) in the binlog relay's form, Debezium's
/// (`{"a":1,"b":[1,2]}`, see `outbox_binlog::JsonText`): the whitespace between tokens
/// goes, strings and numbers stay as they are. Where the two forms still differ (a double
/// of 1e7 or more or below 1e-3, a DATETIME inside a document) the SQL form stays.
fn compact_mysql_json(text: &str) -> String {
    let mut compact = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for character in text.chars() {
        if in_string {
            compact.push(character);
            if escaped {
                escaped = false;
            } else if character == '\\' {
                escaped = true;
            } else if character == '"' {
                in_string = false;
            }
        } else if character == '"' {
            in_string = true;
            compact.push(character);
        } else if !character.is_ascii_whitespace() {
            compact.push(character);
        }
    }
    compact
}

/// The text of a DECIMAL or JSON value.
fn text_of(value: SqlValue) -> Result<String, String> {
    match value {
        SqlValue::Bytes(bytes) => {
            String::from_utf8(bytes).map_err(|_| "the value is not UTF-8 text".to_owned())
        }
        other => Err(unexpected(&other)),
    }
}

fn unexpected(value: &SqlValue) -> String {
    let kind = match value {
        SqlValue::NULL => "NULL",
        SqlValue::Bytes(_) => "bytes",
        SqlValue::Int(_) => "a signed integer",
        SqlValue::UInt(_) => "an unsigned integer",
        SqlValue::Float(_) => "a float",
        SqlValue::Double(_) => "a double",
        SqlValue::Date(..) => "a date",
        SqlValue::Time(..) => "a time",
    };
    format!("the server sent {kind}, which this column type does not hold")
}

#[cfg(test)]
mod tests {
    use super::compact_mysql_json;

    #[test]
    fn mysql_json_text_loses_only_the_whitespace_between_tokens() {
        assert_eq!(
            compact_mysql_json(r#"{"a": 1, "b": [1, 2.5, true, null], "c": {"d": "x"}}"#),
            r#"{"a":1,"b":[1,2.5,true,null],"c":{"d":"x"}}"#
        );
        // Inside strings nothing changes, escaped quotes included.
        assert_eq!(
            compact_mysql_json(r#"{"k": "a, b: \"c d\" \\", "e": "\u0001 x"}"#),
            r#"{"k":"a, b: \"c d\" \\","e":"\u0001 x"}"#
        );
        assert_eq!(compact_mysql_json("[]"), "[]");
        assert_eq!(compact_mysql_json(r#""just text""#), r#""just text""#);
    }
}
