//! The SQL type of an additional column (`column_type = "datetime(6)"`), and how Debezium's
//! MySQL connector turns a value of that type into Kafka Connect data: the Connect schema
//! (`json_with_schema`), the JSON value, the header text Kafka Connect's
//! `SimpleHeaderConverter` writes, and the text of Java's `Struct.toString()` (a
//! StringConverter value).
//!
//! The binlog carries no column precision the router sees, and Debezium's form depends on
//! it (a `DATETIME(3)` is epoch milliseconds, a `DATETIME(6)` epoch microseconds), so the
//! type is configured. Debezium's defaults are reproduced: `time.precision.mode =
//! adaptive_time_microseconds`, `binary.handling.mode = bytes`, `bigint.unsigned.handling.mode
//! = long`, `decimal.handling.mode = precise`; another time precision mode is refused at
//! config load (`time_precision_mode`), another decimal mode by `config from-debezium`.
//!
//! | SQL type | Connect schema (name) | JSON / header |
//! |---|---|---|
//! | `tinyint`, `smallint` (`tinyint unsigned`) | `int16` | number |
//! | `boolean` (a column Debezium knows from `BOOLEAN` DDL it read in the binlog), `bit(1)` | `boolean` | `true` / `false` |
//! | `float` | `float` | Java's `Float.toString` |
//! | `double`, `real` | `double` | Java's `Double.toString` |
//! | `bit(n)`, n > 1 | `bytes` (`io.debezium.data.Bits`, parameter `length`) | Base64 of the value little-endian in (n + 7) / 8 bytes |
//! | `mediumint`, `int`, `integer`, `smallint unsigned`, `mediumint unsigned` | `int32` | number |
//! | `bigint`, `int unsigned`, `bigint unsigned` | `int64` | number |
//! | `char`, `varchar`, `*text`, `enum`, `set` | `string` | text |
//! | `json` (MySQL) | `string` (`io.debezium.data.Json`) | text |
//! | `decimal(p,s)`, `numeric(p,s)` | `bytes` (`org.apache.kafka.connect.data.Decimal`, parameters `scale`, `connect.decimal.precision`) | Base64 of the unscaled two's complement; header and `Struct.toString()`: `BigDecimal.toString()` |
//! | `binary`, `varbinary`, `*blob` | `bytes` | Base64 |
//! | `datetime(0..3)` | `int64` (`io.debezium.time.Timestamp`) | epoch milliseconds (as UTC) |
//! | `datetime(4..6)` | `int64` (`io.debezium.time.MicroTimestamp`) | epoch microseconds |
//! | `timestamp(p)` | `string` (`io.debezium.time.ZonedTimestamp`) | `2024-05-06T07:08:09.120Z`, `p` fraction digits |
//! | `date` | `int32` (`io.debezium.time.Date`) | days since 1970-01-01 |
//! | `time(p)` | `int64` (`io.debezium.time.MicroTime`) | microseconds |
//! | `year` | `int32` (`io.debezium.time.Year`) | the year |

use std::fmt;
use std::fmt::Write as _;

use outbox_binlog::{DateTime, Value};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::connect_json::{base64, push_java_double, push_java_float, Data, Kind, Schema};
use crate::error::RoutingErrorKind;
use crate::java_decimal::JavaDecimal;
use crate::render::{datetime_micros, days_from_civil, format_unix_timestamp_width};

/// Kafka Connect's logical name for decimals (`Decimal.LOGICAL_NAME`, schema version 1).
const CONNECT_DECIMAL_SCHEMA_NAME: &str = "org.apache.kafka.connect.data.Decimal";

/// The Debezium form of a column, derived from its SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// `boolean` (a TINYINT(1) Debezium knows as `BOOLEAN`).
    Boolean,
    /// `int16`.
    Int16,
    /// `float` (FLOAT).
    Float32,
    /// `double` (DOUBLE).
    Float64,
    /// `bytes` named `io.debezium.data.Bits` (BIT(n), n > 1): the bits little-endian.
    Bits {
        /// n, 2 to 64.
        length: u16,
    },
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `string`.
    String,
    /// `string` named `io.debezium.data.Json` (a MySQL JSON column).
    Json,
    /// `bytes`.
    Bytes,
    /// `int64` epoch milliseconds, `io.debezium.time.Timestamp` (DATETIME(0..3)).
    Timestamp,
    /// `int64` epoch microseconds, `io.debezium.time.MicroTimestamp` (DATETIME(4..6)).
    MicroTimestamp,
    /// ISO-8601 UTC text with this many fraction digits, `io.debezium.time.ZonedTimestamp`.
    ZonedTimestamp {
        /// The column's fractional-second precision (0..6).
        precision: u8,
    },
    /// `int32` days since the epoch, `io.debezium.time.Date`.
    Date,
    /// `int64` microseconds, `io.debezium.time.MicroTime`.
    MicroTime,
    /// `int32`, `io.debezium.time.Year`.
    Year,
    /// `bytes` named `org.apache.kafka.connect.data.Decimal`: the unscaled value at the
    /// column's scale (Debezium's `decimal.handling.mode = precise`).
    Decimal {
        /// Total digits (the `connect.decimal.precision` parameter).
        precision: u8,
        /// Digits after the point (the `scale` parameter).
        scale: u8,
    },
}

/// The text a [`ColumnType`] was parsed from (kept for messages and serialization).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SqlColumnType {
    /// As the user wrote it, e.g. `datetime(6)`.
    text: String,
    /// What it means to Debezium.
    kind: ColumnType,
}

impl SqlColumnType {
    /// The Debezium form.
    pub fn kind(&self) -> ColumnType {
        self.kind
    }

    /// Parses a MySQL column type: a name, an optional `(precision)` or `(length)`, and
    /// `unsigned`. Case-insensitive.
    pub fn parse(text: &str) -> Result<SqlColumnType, String> {
        let lower = text.trim().to_ascii_lowercase();
        let (name, argument, rest) = match lower.split_once('(') {
            Some((name, inner)) => {
                let (argument, rest) = inner
                    .split_once(')')
                    .ok_or_else(|| format!("`{text}`: unbalanced parenthesis"))?;
                (name.trim(), Some(argument.trim()), rest)
            }
            None => match lower.split_once(char::is_whitespace) {
                Some((name, rest)) => (name, None, rest),
                None => (lower.as_str(), None, ""),
            },
        };
        if name.is_empty() {
            return Err("the column type is empty".to_string());
        }
        let unsigned = rest.split_whitespace().any(|word| word == "unsigned");
        let precision = || -> Result<u8, String> {
            match argument {
                None => Ok(0),
                Some(digits) => match digits.trim().parse::<u8>() {
                    Ok(precision) if precision <= 6 => Ok(precision),
                    _ => Err(format!(
                        "`{text}`: the fractional-second precision must be 0..6"
                    )),
                },
            }
        };
        let kind = match (name, unsigned) {
            // Debezium writes a column it knows from a snapshot (`SHOW CREATE TABLE`:
            // `tinyint(1)` for BOOLEAN too) as int16, and one whose `BOOLEAN` DDL it parsed
            // from the binlog as a boolean; the server tells the two apart nowhere.
            ("bool" | "boolean", _) => ColumnType::Boolean,
            ("float", _) => ColumnType::Float32,
            ("double" | "real", _) => ColumnType::Float64,
            ("bit", _) => match argument.map_or(Ok(1), |length| length.parse::<u16>()) {
                Ok(1) => ColumnType::Boolean,
                Ok(length @ 2..=64) => ColumnType::Bits { length },
                _ => return Err(format!("`{text}`: BIT takes a length of 1..64")),
            },
            ("tinyint", _) | ("smallint", false) => ColumnType::Int16,
            ("smallint", true) | ("mediumint", _) | ("int" | "integer", false) => {
                ColumnType::Int32
            }
            ("int" | "integer", true) | ("bigint", _) => ColumnType::Int64,
            (
                "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum"
                | "set",
                _,
            ) => ColumnType::String,
            ("json", _) => ColumnType::Json,
            ("binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob", _) => {
                ColumnType::Bytes
            }
            ("datetime", _) => {
                if precision()? <= 3 {
                    ColumnType::Timestamp
                } else {
                    ColumnType::MicroTimestamp
                }
            }
            ("timestamp", _) => ColumnType::ZonedTimestamp {
                precision: precision()?,
            },
            ("date", _) => ColumnType::Date,
            ("time", _) => {
                precision()?;
                ColumnType::MicroTime
            }
            ("year", _) => ColumnType::Year,
            ("decimal" | "numeric" | "dec" | "fixed", _) => {
                // MySQL's defaults: DECIMAL is DECIMAL(10,0), DECIMAL(p) is DECIMAL(p,0).
                let number = |digits: &str| digits.trim().parse::<u8>().ok();
                let (precision, scale) = match argument {
                    None => (Some(10), Some(0)),
                    Some(inner) => match inner.split_once(',') {
                        Some((precision, scale)) => (number(precision), number(scale)),
                        None => (number(inner), Some(0)),
                    },
                };
                match (precision, scale) {
                    (Some(precision @ 1..=65), Some(scale)) if scale <= precision.min(38) => {
                        ColumnType::Decimal { precision, scale }
                    }
                    _ => {
                        return Err(format!(
                            "`{text}`: DECIMAL(precision, scale) takes a precision of 1..65 and a scale of 0..38 not above it"
                        ))
                    }
                }
            }
            _ => {
                return Err(format!(
                    "`{text}` is not a column type the relay renders as Debezium does (integers, boolean, bit, float, double, decimal, text, json, binary, datetime, timestamp, date, time, year)"
                ))
            }
        };
        Ok(SqlColumnType {
            text: text.trim().to_string(),
            kind,
        })
    }

    /// The Debezium form of a column as the server describes it (a row's
    /// [`outbox_binlog::Row::types`]), when the relay renders that form: `None` for TINYINT
    /// (Debezium writes a TINYINT(1) it knows as `BOOLEAN` DDL as a boolean, any other as an
    /// int16, and the binlog tells neither apart) and what the server left unknown; those
    /// need a configured `column_type`.
    pub fn from_server(column: &outbox_binlog::ColumnType) -> Option<SqlColumnType> {
        use outbox_binlog::SqlType;
        let (text, kind) = match column.sql_type {
            SqlType::Integer { bytes: 1, .. } => return None,
            SqlType::Integer {
                bytes: 2,
                unsigned: false,
            } => ("smallint".to_string(), ColumnType::Int16),
            SqlType::Integer {
                bytes: 2,
                unsigned: true,
            } => ("smallint unsigned".to_string(), ColumnType::Int32),
            SqlType::Integer { bytes: 3, unsigned } => (
                format!("mediumint{}", if unsigned { " unsigned" } else { "" }),
                ColumnType::Int32,
            ),
            SqlType::Integer {
                bytes: 4,
                unsigned: false,
            } => ("int".to_string(), ColumnType::Int32),
            SqlType::Integer {
                bytes: 4,
                unsigned: true,
            } => ("int unsigned".to_string(), ColumnType::Int64),
            SqlType::Integer { bytes: 8, unsigned } => (
                format!("bigint{}", if unsigned { " unsigned" } else { "" }),
                ColumnType::Int64,
            ),
            SqlType::Integer { .. } => return None,
            SqlType::Text => ("text".to_string(), ColumnType::String),
            SqlType::Json => ("json".to_string(), ColumnType::Json),
            SqlType::Binary => ("varbinary".to_string(), ColumnType::Bytes),
            SqlType::DateTime { fsp } => (
                format!("datetime({fsp})"),
                if fsp <= 3 {
                    ColumnType::Timestamp
                } else {
                    ColumnType::MicroTimestamp
                },
            ),
            SqlType::Timestamp { fsp } => (
                format!("timestamp({fsp})"),
                ColumnType::ZonedTimestamp { precision: fsp },
            ),
            SqlType::Date => ("date".to_string(), ColumnType::Date),
            SqlType::Time { fsp } => (format!("time({fsp})"), ColumnType::MicroTime),
            SqlType::Year => ("year".to_string(), ColumnType::Year),
            SqlType::Decimal { precision, scale } => (
                format!("decimal({precision},{scale})"),
                ColumnType::Decimal { precision, scale },
            ),
            SqlType::Float => ("float".to_string(), ColumnType::Float32),
            SqlType::Double => ("double".to_string(), ColumnType::Float64),
            SqlType::Bit { length: 1 } => ("bit(1)".to_string(), ColumnType::Boolean),
            SqlType::Bit { length } => (format!("bit({length})"), ColumnType::Bits { length }),
            SqlType::Unknown => return None,
        };
        Some(SqlColumnType { text, kind })
    }

    /// The Connect schema Debezium gives the column (`optional` when it is nullable).
    pub(crate) fn schema(&self, optional: bool) -> Schema {
        let mut parameters = Vec::new();
        let (kind, name) = match self.kind {
            ColumnType::Boolean => (Kind::Boolean, None),
            ColumnType::Int16 => (Kind::Int16, None),
            ColumnType::Float32 => (Kind::Float32, None),
            ColumnType::Float64 => (Kind::Float64, None),
            ColumnType::Bits { length } => {
                parameters.push(("length", length.to_string()));
                (Kind::Bytes, Some("io.debezium.data.Bits"))
            }
            ColumnType::Int32 => (Kind::Int32, None),
            ColumnType::Int64 => (Kind::Int64, None),
            ColumnType::String => (Kind::String, None),
            ColumnType::Json => (Kind::String, Some("io.debezium.data.Json")),
            ColumnType::Bytes => (Kind::Bytes, None),
            ColumnType::Timestamp => (Kind::Int64, Some("io.debezium.time.Timestamp")),
            ColumnType::MicroTimestamp => (Kind::Int64, Some("io.debezium.time.MicroTimestamp")),
            ColumnType::ZonedTimestamp { .. } => {
                (Kind::String, Some("io.debezium.time.ZonedTimestamp"))
            }
            ColumnType::Date => (Kind::Int32, Some("io.debezium.time.Date")),
            ColumnType::MicroTime => (Kind::Int64, Some("io.debezium.time.MicroTime")),
            ColumnType::Year => (Kind::Int32, Some("io.debezium.time.Year")),
            ColumnType::Decimal { precision, scale } => {
                // Connect's `Decimal.builder(scale)`, then Debezium's precision.
                parameters.push(("scale", scale.to_string()));
                parameters.push(("connect.decimal.precision", precision.to_string()));
                (Kind::Bytes, Some(CONNECT_DECIMAL_SCHEMA_NAME))
            }
        };
        Schema {
            kind,
            optional,
            name: name.map(str::to_string),
            version: name.map(|_| 1),
            parameters,
            default: None,
        }
    }

    /// The [`crate::config::DefaultValue`] of a column of this type whose `DEFAULT` is
    /// `default` (`None`: no default). `Err`: Debezium writes a default the relay does not
    /// reproduce (an expression, or a temporal or binary default), saying which.
    pub fn default_value_of(
        &self,
        default: Option<&outbox_binlog::ColumnDefault>,
    ) -> Result<Option<crate::config::DefaultValue>, String> {
        use crate::config::DefaultValue;
        use outbox_binlog::ColumnDefault;
        let Some(default) = default else {
            return Ok(None);
        };
        let literal = match default {
            ColumnDefault::Literal(literal) => literal,
            ColumnDefault::Expression(expression) => {
                return Err(format!(
                    "DEFAULT {expression} is an expression, whose value Debezium's schema carries and the relay does not reproduce"
                ))
            }
        };
        // A BIT default as MariaDB and MySQL write it: b'101'.
        let bit_literal = literal
            .strip_prefix("b'")
            .and_then(|rest| rest.strip_suffix('\''))
            .and_then(|bits| u64::from_str_radix(bits, 2).ok())
            .and_then(|bits| i64::try_from(bits).ok());
        match self.kind {
            ColumnType::Boolean | ColumnType::Bits { .. } if bit_literal.is_some() => {
                Ok(bit_literal.map(DefaultValue::Integer))
            }
            ColumnType::Boolean | ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => {
                literal
                    .parse()
                    .map(|number| Some(DefaultValue::Integer(number)))
                    .map_err(|_| format!("DEFAULT {literal} is not an integer"))
            }
            ColumnType::String | ColumnType::Decimal { .. } => {
                Ok(Some(DefaultValue::Text(literal.clone())))
            }
            ColumnType::Float32 | ColumnType::Float64 if literal.parse::<f64>().is_ok() => {
                Ok(Some(DefaultValue::Text(literal.clone())))
            }
            _ => Err(format!(
                "DEFAULT {literal} of a {} column is not reproduced (integer, boolean, bit, text, DECIMAL and floating-point defaults are)",
                self.text
            )),
        }
    }

    /// The Connect value of a column `DEFAULT` (Debezium's field schema `"default"`): an
    /// integer for integer, boolean and BIT columns, text for text and DECIMAL columns, either
    /// for FLOAT and DOUBLE.
    pub(crate) fn default_data(
        &self,
        default: &crate::config::DefaultValue,
    ) -> Result<Data, RoutingErrorKind> {
        use crate::config::DefaultValue;
        let not_a_number = |_| RoutingErrorKind::UnsupportedType {
            value_type: "a column_default that is not a number",
            usage: "the default of a FLOAT or DOUBLE column",
        };
        let value = match (self.kind, default) {
            (
                ColumnType::Boolean | ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64,
                DefaultValue::Integer(number),
            ) => Value::Int(*number),
            (ColumnType::String, DefaultValue::Text(text)) => Value::Text(text.clone()),
            (ColumnType::Decimal { .. }, DefaultValue::Text(text)) => Value::Decimal(text.clone()),
            (ColumnType::Decimal { .. }, DefaultValue::Integer(number)) => {
                Value::Decimal(number.to_string())
            }
            (ColumnType::Float32, DefaultValue::Text(text)) => {
                Value::Float(text.parse().map_err(not_a_number)?)
            }
            (ColumnType::Float64, DefaultValue::Text(text)) => {
                Value::Double(text.parse().map_err(not_a_number)?)
            }
            (ColumnType::Float32, DefaultValue::Integer(number)) => Value::Float(*number as f32),
            (ColumnType::Bits { .. }, DefaultValue::Integer(number @ 0..)) => {
                Value::UInt(*number as u64)
            }
            (ColumnType::Float64, DefaultValue::Integer(number)) => Value::Double(*number as f64),
            _ => {
                return Err(RoutingErrorKind::UnsupportedType {
                    value_type: match default {
                        DefaultValue::Integer(_) => "an integer column_default",
                        DefaultValue::Text(_) => "a text column_default",
                    },
                    usage: "the default of this column type (integer, boolean and BIT columns take an integer, text and DECIMAL columns text, FLOAT and DOUBLE either; temporal and binary defaults are not reproduced)",
                })
            }
        };
        self.data(&value)
    }

    /// The Connect value Debezium produces for `value` (`Data::Null` for NULL).
    pub(crate) fn data(&self, value: &Value) -> Result<Data, RoutingErrorKind> {
        let mismatch = || RoutingErrorKind::UnsupportedType {
            value_type: crate::render::value_type_name(value),
            usage: "a value of the configured column_type (check the column's SQL type)",
        };
        let integer = |value: &Value| -> Result<i64, RoutingErrorKind> {
            match value {
                Value::Int(number) => Ok(*number),
                Value::UInt(number) => i64::try_from(*number).map_err(|_| mismatch()),
                _ => Err(mismatch()),
            }
        };
        if let Value::Null = value {
            return Ok(Data::Null);
        }
        Ok(match self.kind {
            ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 | ColumnType::Year => {
                Data::Integer(integer(value)?)
            }
            ColumnType::Boolean => Data::Boolean(integer(value)? != 0),
            ColumnType::Float32 => match value {
                Value::Float(number) => Data::Float32(*number),
                _ => return Err(mismatch()),
            },
            ColumnType::Float64 => match value {
                Value::Double(number) => Data::Float64(*number),
                Value::Float(number) => Data::Float64(f64::from(*number)),
                _ => return Err(mismatch()),
            },
            ColumnType::Bits { length } => match value {
                // `BitSet.toByteArray()` padded to the column's bytes, as Debezium sends it.
                Value::UInt(bits) => {
                    let bytes = usize::from(length.div_ceil(8)).min(8);
                    Data::Bytes(bits.to_le_bytes()[..bytes].to_vec())
                }
                _ => return Err(mismatch()),
            },
            ColumnType::String | ColumnType::Json => match value {
                Value::Text(text) => Data::String(text.clone()),
                Value::Json(document) => Data::String(document.as_str().to_string()),
                Value::Decimal(text) => Data::String(text.clone()),
                Value::UndecodableText { .. } => {
                    return Err(crate::render::unusable_value_error(value, "text"))
                }
                _ => return Err(mismatch()),
            },
            ColumnType::Bytes => match value {
                Value::Bytes(bytes) => Data::Bytes(bytes.clone()),
                // Below binlog_row_metadata = FULL the binlog does not say a column is
                // binary, so its bytes arrive as text when they are valid UTF-8 (the same
                // bytes) and as undecodable text otherwise (kept raw): the configured type
                // says what they are.
                Value::Text(text) => Data::Bytes(text.as_bytes().to_vec()),
                Value::UndecodableText { bytes, .. } => Data::Bytes(bytes.clone()),
                _ => return Err(mismatch()),
            },
            ColumnType::Timestamp => match value {
                Value::DateTime(datetime) => {
                    Data::Integer(checked_datetime_micros(datetime)? / 1000)
                }
                _ => return Err(mismatch()),
            },
            ColumnType::MicroTimestamp => match value {
                Value::DateTime(datetime) => Data::Integer(checked_datetime_micros(datetime)?),
                _ => return Err(mismatch()),
            },
            ColumnType::ZonedTimestamp { precision } => match value {
                Value::Timestamp {
                    unix_seconds,
                    micros,
                } => Data::String(format_unix_timestamp_width(
                    *unix_seconds,
                    *micros,
                    precision,
                )),
                _ => return Err(mismatch()),
            },
            ColumnType::Date => match value {
                Value::Date(date) | Value::DateTime(date) => Data::Integer(days_from_civil(
                    i64::from(date.year),
                    u32::from(date.month),
                    u32::from(date.day),
                )),
                _ => return Err(mismatch()),
            },
            ColumnType::Decimal { scale, .. } => match value {
                Value::Decimal(text) => {
                    Data::Decimal(JavaDecimal::from_text(text, scale).ok_or_else(mismatch)?)
                }
                _ => return Err(mismatch()),
            },
            ColumnType::MicroTime => match value {
                Value::Time {
                    negative,
                    hours,
                    minutes,
                    seconds,
                    micros,
                } => {
                    let magnitude = ((i64::from(*hours) * 60 + i64::from(*minutes)) * 60
                        + i64::from(*seconds))
                        * 1_000_000
                        + i64::from(*micros);
                    Data::Integer(if *negative { -magnitude } else { magnitude })
                }
                _ => return Err(mismatch()),
            },
        })
    }
}

/// Epoch microseconds of a DATETIME as UTC; a zero or invalid date is an error (Debezium
/// would write null for a zero date, which the relay does not guess).
fn checked_datetime_micros(datetime: &DateTime) -> Result<i64, RoutingErrorKind> {
    datetime_micros(datetime)
}

/// Kafka Connect's `SimpleHeaderConverter.fromConnectHeader` of a Connect value
/// (`Values.convertToString`): `None` for null, numbers in decimal, text as is, bytes as
/// standard Base64.
pub(crate) fn header_bytes(data: &Data) -> Option<Vec<u8>> {
    match data {
        Data::Null => None,
        Data::Integer(number) => Some(number.to_string().into_bytes()),
        Data::String(text) => Some(text.as_bytes().to_vec()),
        Data::Bytes(bytes) => Some(base64(bytes).into_bytes()),
        Data::Decimal(decimal) => Some(decimal.java_text().into_bytes()),
        Data::Boolean(value) => Some(value.to_string().into_bytes()),
        Data::Float32(_) | Data::Float64(_) => {
            let mut text = String::new();
            push_java_text(&mut text, data)?;
            Some(text.into_bytes())
        }
        // Not produced by a column type (only by an expanded payload).
        Data::Array(_) | Data::Struct(_) => None,
    }
}

/// Appends a Connect value as Java's `StringBuilder.append(Object)` prints it inside
/// `Struct.toString()`; `None` when Java's text is not reproducible. Debezium hands binary
/// columns over as a `ByteBuffer` wrapping the bytes, whose `toString()` names only its
/// size (`java.nio.HeapByteBuffer[pos=0 lim=4 cap=4]`: the differential test sees it as a
/// StringConverter key).
pub(crate) fn push_java_text(out: &mut String, data: &Data) -> Option<()> {
    match data {
        Data::Null => out.push_str("null"),
        Data::Integer(number) => {
            let _ = write!(out, "{number}");
        }
        Data::String(text) => out.push_str(text),
        Data::Decimal(decimal) => out.push_str(&decimal.java_text()),
        Data::Float32(number) => push_java_float(out, *number).ok()?,
        Data::Float64(number) => push_java_double(out, *number).ok()?,
        Data::Boolean(value) => {
            let _ = write!(out, "{value}");
        }
        Data::Bytes(bytes) => {
            let _ = write!(
                out,
                "java.nio.HeapByteBuffer[pos=0 lim={0} cap={0}]",
                bytes.len()
            );
        }
        Data::Array(_) | Data::Struct(_) => return None,
    }
    Some(())
}

impl fmt::Display for SqlColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for SqlColumnType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for SqlColumnType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        SqlColumnType::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(sql: &str, value: Value) -> Data {
        SqlColumnType::parse(sql).unwrap().data(&value).unwrap()
    }

    #[test]
    fn sql_types_map_to_debezium_schemas() {
        let kind = |sql: &str| SqlColumnType::parse(sql).map(|t| t.kind());
        assert_eq!(kind("DATETIME"), Ok(ColumnType::Timestamp));
        assert_eq!(kind("datetime(3)"), Ok(ColumnType::Timestamp));
        assert_eq!(kind("datetime(6)"), Ok(ColumnType::MicroTimestamp));
        assert_eq!(
            kind("timestamp(3)"),
            Ok(ColumnType::ZonedTimestamp { precision: 3 })
        );
        assert_eq!(kind("int"), Ok(ColumnType::Int32));
        assert_eq!(kind("INT UNSIGNED"), Ok(ColumnType::Int64));
        assert_eq!(kind("smallint"), Ok(ColumnType::Int16));
        assert_eq!(kind("varbinary(16)"), Ok(ColumnType::Bytes));
        assert_eq!(kind("varchar(32)"), Ok(ColumnType::String));
        assert!(kind("datetime(7)").is_err());
        assert_eq!(kind("tinyint(1)"), Ok(ColumnType::Int16));
        assert_eq!(kind("boolean"), Ok(ColumnType::Boolean));
        assert_eq!(
            SqlColumnType::parse("bool").unwrap().data(&Value::Int(1)),
            Ok(Data::Boolean(true))
        );
        assert_eq!(
            kind("DECIMAL(20, 10) unsigned"),
            Ok(ColumnType::Decimal {
                precision: 20,
                scale: 10
            })
        );
        assert_eq!(
            kind("numeric"),
            Ok(ColumnType::Decimal {
                precision: 10,
                scale: 0
            })
        );
        assert_eq!(
            kind("decimal(7)"),
            Ok(ColumnType::Decimal {
                precision: 7,
                scale: 0
            })
        );
        assert!(kind("decimal(4,5)").is_err());
        assert!(kind("decimal(66,2)").is_err());
        assert_eq!(kind("int(10) unsigned"), Ok(ColumnType::Int64));
        assert!(kind("geometry").is_err());
    }

    #[test]
    fn temporal_values_are_debezium_numbers() {
        let datetime = Value::DateTime(DateTime {
            year: 2024,
            month: 5,
            day: 6,
            hour: 7,
            minute: 8,
            second: 9,
            micros: 123_456,
        });
        assert_eq!(
            data("datetime(3)", datetime.clone()),
            Data::Integer(1_714_979_289_123)
        );
        assert_eq!(
            data("datetime(6)", datetime),
            Data::Integer(1_714_979_289_123_456)
        );
        let date = Value::Date(DateTime {
            year: 1970,
            month: 1,
            day: 11,
            hour: 0,
            minute: 0,
            second: 0,
            micros: 0,
        });
        assert_eq!(data("date", date), Data::Integer(10));
        let time = Value::Time {
            negative: true,
            hours: 1,
            minutes: 0,
            seconds: 1,
            micros: 5,
        };
        assert_eq!(data("time(6)", time), Data::Integer(-3_601_000_005));
        let timestamp = Value::Timestamp {
            unix_seconds: 1_714_979_289,
            micros: 120_000,
        };
        assert_eq!(
            data("timestamp(3)", timestamp.clone()),
            Data::String("2024-05-06T07:08:09.120Z".into())
        );
        assert_eq!(
            data("timestamp", timestamp),
            Data::String("2024-05-06T07:08:09Z".into())
        );
    }

    #[test]
    fn a_binary_column_the_binlog_did_not_call_binary_is_its_bytes() {
        let binary = SqlColumnType::parse("varbinary(8)").unwrap();
        assert_eq!(
            binary.data(&Value::Text("AB".into())),
            Ok(Data::Bytes(b"AB".to_vec()))
        );
        assert_eq!(
            binary.data(&Value::UndecodableText {
                bytes: vec![0x00, 0xff, 0x10],
                charset: "unknown".into()
            }),
            Ok(Data::Bytes(vec![0x00, 0xff, 0x10]))
        );
    }

    #[test]
    fn floats_and_bits_are_debeziums() {
        let text = |sql: &str, value: Value| {
            let data = SqlColumnType::parse(sql).unwrap().data(&value).unwrap();
            String::from_utf8(header_bytes(&data).unwrap()).unwrap()
        };
        // Java's Float.toString / Double.toString.
        assert_eq!(text("float", Value::Float(0.1)), "0.1");
        assert_eq!(text("float", Value::Float(1.0e7)), "1.0E7");
        assert_eq!(text("double", Value::Double(12_345_678.9)), "1.23456789E7");
        assert_eq!(text("double", Value::Double(-0.5)), "-0.5");
        // BIT(1) is a boolean; BIT(10) its value little-endian in two bytes (b'1000000011').
        assert_eq!(text("bit(1)", Value::UInt(1)), "true");
        assert_eq!(text("bit(10)", Value::UInt(0b10_0000_0011)), "AwI=");
        let bits = SqlColumnType::parse("bit(10)").unwrap();
        assert_eq!(
            bits.default_value_of(Some(&outbox_binlog::ColumnDefault::Literal(
                "b'101'".into()
            ))),
            Ok(Some(crate::config::DefaultValue::Integer(5)))
        );
        assert_eq!(
            bits.default_data(&crate::config::DefaultValue::Integer(5)),
            Ok(Data::Bytes(vec![5, 0]))
        );
        assert!(SqlColumnType::parse("bit(65)").is_err());
    }

    #[test]
    fn decimals_are_connect_decimals() {
        let amount = SqlColumnType::parse("decimal(20,10)").unwrap();
        let value = amount
            .data(&Value::Decimal("-0.0000000100".into()))
            .unwrap();
        assert_eq!(header_bytes(&value), Some(b"-1.00E-8".to_vec()));
        let mut java = String::new();
        push_java_text(&mut java, &value).unwrap();
        assert_eq!(java, "-1.00E-8");
        // More fraction digits than the column's scale is not a value of the column.
        assert!(amount
            .data(&Value::Decimal("1.00000000001".into()))
            .is_err());
        assert!(amount.data(&Value::Int(1)).is_err());
        assert_eq!(amount.data(&Value::Null), Ok(Data::Null));
    }

    #[test]
    fn headers_as_simple_header_converter_writes_them() {
        assert_eq!(header_bytes(&Data::Null), None);
        assert_eq!(
            header_bytes(&Data::Bytes(vec![0, 1, 0xfe, 0xff])),
            Some(b"AAH+/w==".to_vec())
        );
        assert_eq!(header_bytes(&Data::Integer(-7)), Some(b"-7".to_vec()));
    }
}
