//! TABLE_MAP events turned into a per-table **decoding plan**: for every column, how many
//! bytes its value takes and how they become a [`crate::Value`]. A plan is built once per
//! distinct table map (identical TABLE_MAP bytes reuse it), so decoding a row is a loop over
//! precomputed column kinds without looking at metadata again.
//!
//! Layout of a TABLE_MAP event body (after the 6- or 4-byte table id and 2 flag bytes):
//! `db_len:u8 db 0x00 table_len:u8 table 0x00 column_count:lenenc types[column_count]
//! metadata_len:lenenc metadata null_bitmap[(column_count+7)/8] optional_metadata...`.

use std::sync::Arc;

use super::charset::{decode_latin1, encoding_of_collation, TextEncoding};
use super::reader::ByteReader;
use crate::types::{ColumnNames, ColumnType, ColumnTypes, Flavor, SqlType, TableName};

/// MySQL column type codes as they appear in TABLE_MAP events.
pub(crate) mod column_type {
    pub(crate) const DECIMAL: u8 = 0;
    pub(crate) const TINY: u8 = 1;
    pub(crate) const SHORT: u8 = 2;
    pub(crate) const LONG: u8 = 3;
    pub(crate) const FLOAT: u8 = 4;
    pub(crate) const DOUBLE: u8 = 5;
    pub(crate) const NULL: u8 = 6;
    pub(crate) const TIMESTAMP: u8 = 7;
    pub(crate) const LONGLONG: u8 = 8;
    pub(crate) const INT24: u8 = 9;
    pub(crate) const DATE: u8 = 10;
    pub(crate) const TIME: u8 = 11;
    pub(crate) const DATETIME: u8 = 12;
    pub(crate) const YEAR: u8 = 13;
    pub(crate) const NEWDATE: u8 = 14;
    pub(crate) const VARCHAR: u8 = 15;
    pub(crate) const BIT: u8 = 16;
    pub(crate) const TIMESTAMP2: u8 = 17;
    pub(crate) const DATETIME2: u8 = 18;
    pub(crate) const TIME2: u8 = 19;
    pub(crate) const VECTOR: u8 = 242;
    pub(crate) const JSON: u8 = 245;
    pub(crate) const NEWDECIMAL: u8 = 246;
    pub(crate) const ENUM: u8 = 247;
    pub(crate) const SET: u8 = 248;
    pub(crate) const TINY_BLOB: u8 = 249;
    pub(crate) const MEDIUM_BLOB: u8 = 250;
    pub(crate) const LONG_BLOB: u8 = 251;
    pub(crate) const BLOB: u8 = 252;
    pub(crate) const VAR_STRING: u8 = 253;
    pub(crate) const STRING: u8 = 254;
    pub(crate) const GEOMETRY: u8 = 255;
}

use column_type as ct;

/// How one column's value is laid out in a row image and what it becomes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ColumnKind {
    /// TINYINT..BIGINT: `bytes` little-endian bytes.
    Integer {
        /// 1, 2, 3, 4 or 8.
        bytes: u8,
        /// From the SIGNEDNESS metadata; signed when absent.
        unsigned: bool,
    },
    /// FLOAT (4 bytes).
    Float,
    /// DOUBLE (8 bytes).
    Double,
    /// DECIMAL in MySQL's binary format.
    Decimal {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// YEAR: one byte, 0 or years since 1900.
    Year,
    /// DATE: 3 bytes.
    Date,
    /// Old TIME: 3 bytes `HHMMSS` as an integer.
    TimeOld,
    /// TIME(fsp), MySQL 5.6 format.
    Time2 {
        /// Fractional second digits 0-6.
        fsp: u8,
    },
    /// Old DATETIME: 8 bytes `YYYYMMDDhhmmss` as an integer.
    DateTimeOld,
    /// DATETIME(fsp), MySQL 5.6 format.
    DateTime2 {
        /// Fractional second digits 0-6.
        fsp: u8,
    },
    /// Old TIMESTAMP: 4 bytes little-endian seconds.
    TimestampOld,
    /// TIMESTAMP(fsp), MySQL 5.6 format.
    Timestamp2 {
        /// Fractional second digits 0-6.
        fsp: u8,
    },
    /// CHAR/BINARY/VARCHAR/VARBINARY: a 1- or 2-byte length, then the bytes.
    ShortString {
        /// Bytes of the length prefix.
        length_bytes: u8,
        /// How the bytes become a value.
        encoding: TextEncoding,
    },
    /// BINARY(n): like `ShortString`, but the server strips trailing 0x00 bytes when it
    /// writes the row, so the value is padded back to its `width` (as the server does when
    /// it reads the column).
    FixedBinary {
        /// Bytes of the length prefix.
        length_bytes: u8,
        /// The column's byte width n.
        width: u16,
    },
    /// BLOB/TEXT (and MariaDB JSON): a 1-4 byte length, then the bytes.
    Blob {
        /// Bytes of the length prefix.
        length_bytes: u8,
        /// How the bytes become a value (`Binary` for BLOB, a text charset for TEXT).
        encoding: TextEncoding,
    },
    /// MySQL JSON: a length, then binary JSON.
    Json {
        /// Bytes of the length prefix.
        length_bytes: u8,
        /// The column may be NULL (TABLE_MAP's null bitmap): decides what an empty value is.
        nullable: bool,
    },
    /// GEOMETRY: a length, then opaque bytes.
    OpaqueBytes {
        /// Bytes of the length prefix.
        length_bytes: u8,
    },
    /// MySQL 9 VECTOR: a length, then little-endian 32-bit floats (4 bytes per dimension).
    Vector {
        /// Bytes of the length prefix.
        length_bytes: u8,
    },
    /// ENUM: 1 or 2 bytes holding the 1-based index.
    Enum {
        /// 1 or 2.
        bytes: u8,
        /// Member names from ENUM_STR_VALUE metadata, when present.
        names: Option<Arc<[String]>>,
    },
    /// SET: 1-8 bytes holding a bitmask of members.
    Set {
        /// 1 to 8.
        bytes: u8,
        /// Member names from SET_STR_VALUE metadata, when present.
        names: Option<Arc<[String]>>,
    },
    /// BIT(n): `bytes` big-endian bytes.
    Bit {
        /// 1 to 8.
        bytes: u8,
        /// n, 1 to 64 (Debezium's `length` of a BIT(n > 1), a boolean for BIT(1)).
        bits: u16,
    },
    /// The NULL type: no bytes, always NULL.
    NullType,
}

/// Everything needed to decode the rows of one table map.
#[derive(Debug)]
pub(crate) struct TablePlan {
    /// The table the map describes (shared by every row change).
    pub(crate) table: Arc<TableName>,
    /// One entry per column, in table order.
    pub(crate) columns: Vec<ColumnKind>,
    /// The raw column type codes, kept for error messages.
    pub(crate) type_codes: Vec<u8>,
    /// Column names from the COLUMN_NAME optional metadata (binlog_row_metadata=FULL).
    pub(crate) names_from_metadata: Option<ColumnNames>,
    /// Each column's SQL type and nullability, for the rows' [`Row::types`].
    pub(crate) types: ColumnTypes,
}

impl ColumnKind {
    /// The SQL type this layout belongs to.
    fn sql_type(&self) -> SqlType {
        match self {
            ColumnKind::Integer { bytes, unsigned } => SqlType::Integer {
                bytes: *bytes,
                unsigned: *unsigned,
            },
            ColumnKind::Float => SqlType::Float,
            ColumnKind::Double => SqlType::Double,
            ColumnKind::Decimal { precision, scale } => SqlType::Decimal {
                precision: *precision,
                scale: *scale,
            },
            ColumnKind::Year => SqlType::Year,
            ColumnKind::Date => SqlType::Date,
            ColumnKind::TimeOld => SqlType::Time { fsp: 0 },
            ColumnKind::Time2 { fsp } => SqlType::Time { fsp: *fsp },
            ColumnKind::DateTimeOld => SqlType::DateTime { fsp: 0 },
            ColumnKind::DateTime2 { fsp } => SqlType::DateTime { fsp: *fsp },
            ColumnKind::TimestampOld => SqlType::Timestamp { fsp: 0 },
            ColumnKind::Timestamp2 { fsp } => SqlType::Timestamp { fsp: *fsp },
            ColumnKind::ShortString { encoding, .. } | ColumnKind::Blob { encoding, .. } => {
                match encoding {
                    TextEncoding::Binary => SqlType::Binary,
                    TextEncoding::Unknown => SqlType::Unknown,
                    _ => SqlType::Text,
                }
            }
            ColumnKind::FixedBinary { .. } => SqlType::Binary,
            ColumnKind::Json { .. } => SqlType::Json,
            ColumnKind::Enum { .. } | ColumnKind::Set { .. } => SqlType::Text,
            ColumnKind::Bit { bits, .. } => SqlType::Bit { length: *bits },
            ColumnKind::OpaqueBytes { .. } | ColumnKind::Vector { .. } | ColumnKind::NullType => {
                SqlType::Unknown
            }
        }
    }
}

/// The part of a TABLE_MAP needed before deciding whether to build a plan.
/// (The table id, which leads the body, is read with `rows::read_table_id` before this, to
/// recognise a map seen before without parsing it.)
pub(crate) struct TableMapHead<'a> {
    /// Schema name (raw bytes; names are UTF-8 in practice).
    pub(crate) database: &'a [u8],
    /// Table name.
    pub(crate) table: &'a [u8],
    /// Offset of the column count in the event body.
    body_offset: usize,
}

/// Reads the names of a TABLE_MAP event body (after its table id). `table_id_bytes` is 6, or 4 for
/// servers older than 5.1.4 (post-header length 6).
pub(crate) fn read_head(data: &[u8], table_id_bytes: usize) -> Result<TableMapHead<'_>, String> {
    let mut reader = ByteReader::new(data);
    reader.skip(table_id_bytes + 2)?;
    let database_len = usize::from(reader.u8()?);
    let database = reader.bytes(database_len)?;
    reader.skip(1)?;
    let table_len = usize::from(reader.u8()?);
    let table = reader.bytes(table_len)?;
    reader.skip(1)?;
    Ok(TableMapHead {
        database,
        table,
        body_offset: reader.offset(),
    })
}

/// Optional metadata field types (MySQL `Table_map_log_event::Optional_metadata_field_type`).
mod optional_field {
    pub(super) const SIGNEDNESS: u8 = 1;
    pub(super) const DEFAULT_CHARSET: u8 = 2;
    pub(super) const COLUMN_CHARSET: u8 = 3;
    pub(super) const COLUMN_NAME: u8 = 4;
    pub(super) const SET_STR_VALUE: u8 = 5;
    pub(super) const ENUM_STR_VALUE: u8 = 6;
    pub(super) const ENUM_AND_SET_DEFAULT_CHARSET: u8 = 10;
    pub(super) const ENUM_AND_SET_COLUMN_CHARSET: u8 = 11;
}

/// Column type and raw per-column metadata before optional metadata is applied.
struct RawColumn {
    /// Type code after resolving STRING's real type (ENUM/SET/STRING).
    real_type: u8,
    /// Type code as written in the types array.
    written_type: u8,
    /// The 0-2 metadata bytes.
    meta: [u8; 2],
}

/// Optional metadata collected from the TLV fields.
#[derive(Default)]
struct OptionalMetadata {
    /// One flag per numeric column, true = unsigned.
    unsigned_flags: Option<Vec<bool>>,
    /// Collation per character column.
    charsets: Option<Vec<u16>>,
    /// Collation per ENUM/SET column.
    enum_set_charsets: Option<Vec<u16>>,
    /// Column names.
    names: Option<Vec<String>>,
    /// Member names per SET column (raw bytes in the column's charset).
    set_values: Option<Vec<Vec<Vec<u8>>>>,
    /// Member names per ENUM column (raw bytes in the column's charset).
    enum_values: Option<Vec<Vec<Vec<u8>>>>,
}

/// Columns the SIGNEDNESS metadata has a flag for. YEAR is included: MariaDB 10.11 writes a
/// flag for it (checked by `tests/decode_mariadb_types.rs`), as does MySQL per mysql_common.
fn is_numeric(real_type: u8) -> bool {
    matches!(
        real_type,
        ct::TINY
            | ct::SHORT
            | ct::INT24
            | ct::LONG
            | ct::LONGLONG
            | ct::NEWDECIMAL
            | ct::FLOAT
            | ct::DOUBLE
            | ct::YEAR
    )
}

fn is_character(real_type: u8, flavor: Flavor) -> bool {
    matches!(
        real_type,
        ct::STRING
            | ct::VAR_STRING
            | ct::VARCHAR
            | ct::BLOB
            | ct::TINY_BLOB
            | ct::MEDIUM_BLOB
            | ct::LONG_BLOB
    ) || (real_type == ct::GEOMETRY && flavor == Flavor::Mariadb)
        // MySQL 9 counts VECTOR (binary charset) among the columns its charset metadata
        // covers (`is_character_type` in sql/log_event.cc); skipping it would misalign every
        // later column's charset.
        || (real_type == ct::VECTOR && flavor == Flavor::Mysql)
}

fn is_enum_or_set(real_type: u8) -> bool {
    matches!(real_type, ct::ENUM | ct::SET)
}

/// Builds the decoding plan of a TABLE_MAP event body.
pub(crate) fn build_plan(
    data: &[u8],
    head: &TableMapHead<'_>,
    flavor: Flavor,
) -> Result<TablePlan, String> {
    let mut reader = ByteReader::new(data);
    reader.skip(head.body_offset)?;
    let column_count = usize::try_from(reader.lenenc()?).map_err(|_| "column count overflows")?;
    if column_count > 4096 {
        return Err(format!(
            "column count {column_count} exceeds MySQL's limit of 4096"
        ));
    }
    let types = reader.bytes(column_count)?;
    let metadata_len =
        usize::try_from(reader.lenenc()?).map_err(|_| "metadata length overflows")?;
    let metadata = reader.bytes(metadata_len)?;
    let null_bitmap = reader.bytes(column_count.div_ceil(8))?;
    let optional = reader.rest();
    let optional_bytes = optional;

    let mut meta_reader = ByteReader::new(metadata);
    let mut raw_columns = Vec::with_capacity(column_count);
    for (index, &written_type) in types.iter().enumerate() {
        let meta_len = match written_type {
            ct::FLOAT
            | ct::DOUBLE
            | ct::BLOB
            | ct::TINY_BLOB
            | ct::MEDIUM_BLOB
            | ct::LONG_BLOB
            | ct::GEOMETRY
            | ct::JSON
            | ct::TIME2
            | ct::DATETIME2
            | ct::TIMESTAMP2
            | ct::VECTOR => 1,
            ct::VARCHAR | ct::NEWDECIMAL | ct::STRING | ct::ENUM | ct::SET | ct::BIT => 2,
            ct::DECIMAL
            | ct::TINY
            | ct::SHORT
            | ct::LONG
            | ct::LONGLONG
            | ct::INT24
            | ct::NULL
            | ct::TIMESTAMP
            | ct::DATE
            | ct::NEWDATE
            | ct::TIME
            | ct::DATETIME
            | ct::YEAR => 0,
            other => return Err(unknown_type_error(other, index, optional_bytes)),
        };
        let mut meta = [0u8; 2];
        meta[..meta_len].copy_from_slice(meta_reader.bytes(meta_len)?);
        let real_type = if written_type == ct::STRING && meta[0] != 0 {
            // The first metadata byte holds the real type (ENUM/SET/STRING), with two bits of
            // the length folded in for long CHAR columns.
            match meta[0] | 0x30 {
                ct::ENUM => ct::ENUM,
                ct::SET => ct::SET,
                ct::STRING => ct::STRING,
                other => {
                    return Err(format!(
                        "column {} is a STRING column with unexpected real type {other}",
                        index + 1
                    ))
                }
            }
        } else {
            written_type
        };
        raw_columns.push(RawColumn {
            real_type,
            written_type,
            meta,
        });
    }
    if !meta_reader.rest().is_empty() {
        return Err(format!(
            "{} bytes of column metadata left over after {column_count} columns",
            meta_reader.rest().len()
        ));
    }

    let optional = parse_optional_metadata(optional, &raw_columns, flavor)?;

    let numeric_count = raw_columns
        .iter()
        .filter(|c| is_numeric(c.real_type))
        .count();
    if let Some(flags) = &optional.unsigned_flags {
        if flags.len() < numeric_count {
            return Err(format!(
                "SIGNEDNESS metadata covers {} columns, the table has {numeric_count} numeric columns",
                flags.len()
            ));
        }
    }
    let character_count = raw_columns
        .iter()
        .filter(|c| is_character(c.real_type, flavor))
        .count();
    if let Some(charsets) = &optional.charsets {
        if charsets.len() != character_count {
            return Err(format!(
                "charset metadata covers {} columns, the table has {character_count} character columns",
                charsets.len()
            ));
        }
    }
    if let Some(names) = &optional.names {
        if names.len() != column_count {
            return Err(format!(
                "COLUMN_NAME metadata has {} names for {column_count} columns",
                names.len()
            ));
        }
    }

    let mut numeric_index = 0usize;
    let mut character_index = 0usize;
    let mut enum_index = 0usize;
    let mut set_index = 0usize;
    let mut enum_or_set_index = 0usize;
    let mut columns = Vec::with_capacity(column_count);
    for (index, raw) in raw_columns.iter().enumerate() {
        let unsigned = if is_numeric(raw.real_type) {
            let flag = optional
                .unsigned_flags
                .as_ref()
                .and_then(|flags| flags.get(numeric_index).copied())
                .unwrap_or(false);
            numeric_index += 1;
            flag
        } else {
            false
        };
        let encoding = if is_character(raw.real_type, flavor) {
            let encoding = match &optional.charsets {
                Some(charsets) => charsets
                    .get(character_index)
                    .map(|&id| encoding_of_collation(id))
                    .unwrap_or(TextEncoding::Unknown),
                None => TextEncoding::Unknown,
            };
            character_index += 1;
            encoding
        } else {
            TextEncoding::Unknown
        };
        let member_encoding = if is_enum_or_set(raw.real_type) {
            let encoding = optional
                .enum_set_charsets
                .as_ref()
                .and_then(|ids| ids.get(enum_or_set_index))
                .map(|&id| encoding_of_collation(id))
                .unwrap_or(TextEncoding::Unknown);
            enum_or_set_index += 1;
            encoding
        } else {
            TextEncoding::Unknown
        };
        let kind = match raw.real_type {
            ct::TINY => ColumnKind::Integer { bytes: 1, unsigned },
            ct::SHORT => ColumnKind::Integer { bytes: 2, unsigned },
            ct::INT24 => ColumnKind::Integer { bytes: 3, unsigned },
            ct::LONG => ColumnKind::Integer { bytes: 4, unsigned },
            ct::LONGLONG => ColumnKind::Integer { bytes: 8, unsigned },
            ct::FLOAT => {
                if raw.meta[0] != 4 {
                    return Err(format!(
                        "FLOAT column {} has size {}",
                        index + 1,
                        raw.meta[0]
                    ));
                }
                ColumnKind::Float
            }
            ct::DOUBLE => {
                if raw.meta[0] != 8 {
                    return Err(format!(
                        "DOUBLE column {} has size {}",
                        index + 1,
                        raw.meta[0]
                    ));
                }
                ColumnKind::Double
            }
            ct::NEWDECIMAL => {
                let (precision, scale) = (raw.meta[0], raw.meta[1]);
                if precision == 0 || precision > 65 || scale > 30 || scale > precision {
                    return Err(format!(
                        "DECIMAL column {} has precision {precision} and scale {scale}",
                        index + 1
                    ));
                }
                ColumnKind::Decimal { precision, scale }
            }
            ct::DECIMAL => {
                return Err(format!(
                    "column {} uses the pre-5.0 DECIMAL format, which this reader does not decode",
                    index + 1
                ))
            }
            ct::YEAR => ColumnKind::Year,
            ct::DATE | ct::NEWDATE => ColumnKind::Date,
            ct::TIME => ColumnKind::TimeOld,
            ct::DATETIME => ColumnKind::DateTimeOld,
            ct::TIMESTAMP => ColumnKind::TimestampOld,
            ct::TIME2 | ct::DATETIME2 | ct::TIMESTAMP2 => {
                let fsp = raw.meta[0];
                if fsp > 6 {
                    return Err(format!("temporal column {} has fsp {fsp}", index + 1));
                }
                match raw.real_type {
                    ct::TIME2 => ColumnKind::Time2 { fsp },
                    ct::DATETIME2 => ColumnKind::DateTime2 { fsp },
                    _ => ColumnKind::Timestamp2 { fsp },
                }
            }
            ct::VARCHAR => {
                let max_len = u16::from_le_bytes(raw.meta);
                ColumnKind::ShortString {
                    length_bytes: if max_len < 256 { 1 } else { 2 },
                    encoding,
                }
            }
            ct::STRING => {
                // CHAR(n)/BINARY(n): max byte length has two high bits folded into meta[0].
                let max_len = if raw.written_type == ct::STRING && raw.meta[0] != 0 {
                    ((u16::from((raw.meta[0] & 0x30) ^ 0x30)) << 4) | u16::from(raw.meta[1])
                } else {
                    u16::from(raw.meta[1])
                };
                let length_bytes = if max_len < 256 { 1 } else { 2 };
                if encoding == TextEncoding::Binary {
                    ColumnKind::FixedBinary {
                        length_bytes,
                        width: max_len,
                    }
                } else {
                    ColumnKind::ShortString {
                        length_bytes,
                        encoding,
                    }
                }
            }
            ct::BLOB | ct::TINY_BLOB | ct::MEDIUM_BLOB | ct::LONG_BLOB => {
                let length_bytes = raw.meta[0];
                if !(1..=4).contains(&length_bytes) {
                    return Err(format!(
                        "BLOB column {} has length size {length_bytes}",
                        index + 1
                    ));
                }
                ColumnKind::Blob {
                    length_bytes,
                    encoding,
                }
            }
            ct::JSON => {
                let length_bytes = raw.meta[0];
                if !(1..=4).contains(&length_bytes) {
                    return Err(format!(
                        "JSON column {} has length size {length_bytes}",
                        index + 1
                    ));
                }
                ColumnKind::Json {
                    length_bytes,
                    nullable: null_bitmap[index / 8] & (1 << (index % 8)) != 0,
                }
            }
            ct::GEOMETRY | ct::VECTOR => {
                let length_bytes = raw.meta[0];
                if !(1..=4).contains(&length_bytes) {
                    return Err(format!(
                        "column {} (type {}) has length size {length_bytes}",
                        index + 1,
                        raw.real_type
                    ));
                }
                if raw.real_type == ct::VECTOR {
                    ColumnKind::Vector { length_bytes }
                } else {
                    ColumnKind::OpaqueBytes { length_bytes }
                }
            }
            ct::ENUM => {
                let bytes = raw.meta[1];
                if !(1..=2).contains(&bytes) {
                    return Err(format!("ENUM column {} has size {bytes}", index + 1));
                }
                let names = optional
                    .enum_values
                    .as_ref()
                    .and_then(|values| values.get(enum_index))
                    .map(|values| member_names(values, &member_encoding));
                enum_index += 1;
                ColumnKind::Enum { bytes, names }
            }
            ct::SET => {
                let bytes = raw.meta[1];
                if !(1..=8).contains(&bytes) {
                    return Err(format!("SET column {} has size {bytes}", index + 1));
                }
                let names = optional
                    .set_values
                    .as_ref()
                    .and_then(|values| values.get(set_index))
                    .map(|values| member_names(values, &member_encoding));
                set_index += 1;
                ColumnKind::Set { bytes, names }
            }
            ct::BIT => {
                let bits = u16::from(raw.meta[1]) * 8 + u16::from(raw.meta[0]);
                if bits == 0 || bits > 64 || raw.meta[0] > 7 {
                    return Err(format!("BIT column {} has {bits} bits", index + 1));
                }
                ColumnKind::Bit {
                    bytes: u8::try_from(bits.div_ceil(8)).unwrap_or(8),
                    bits,
                }
            }
            ct::NULL => ColumnKind::NullType,
            other => return Err(unknown_type_error(other, index, optional_bytes)),
        };
        columns.push(kind);
    }

    let database = String::from_utf8_lossy(head.database).into_owned();
    let table = String::from_utf8_lossy(head.table).into_owned();
    let types = columns
        .iter()
        .enumerate()
        .map(|(index, kind)| ColumnType {
            sql_type: kind.sql_type(),
            nullable: null_bitmap[index / 8] & (1 << (index % 8)) != 0,
        })
        .collect();
    Ok(TablePlan {
        table: Arc::new(TableName::new(database, table)),
        columns,
        type_codes: raw_columns.iter().map(|c| c.real_type).collect(),
        names_from_metadata: optional.names.map(ColumnNames::from),
        types,
    })
}

/// The error for a column type this reader cannot decode: names the type code and the column
/// (its number, and its name when the map carries COLUMN_NAME metadata,
/// binlog_row_metadata=FULL). The caller adds the table and position.
fn unknown_type_error(type_code: u8, index: usize, optional: &[u8]) -> String {
    let name = column_name_in(optional, index)
        .map(|name| format!(" `{name}`"))
        .unwrap_or_default();
    format!(
        "column {}{name} has type code {type_code}, which this reader cannot decode (a column \
         type newer than this reader: leave the column out of the watched table or upgrade \
         outbox-relay)",
        index + 1
    )
}

/// The name of column `index` from the COLUMN_NAME field of optional metadata, if present.
fn column_name_in(optional: &[u8], index: usize) -> Option<String> {
    let mut reader = ByteReader::new(optional);
    while !reader.rest().is_empty() {
        let field_type = reader.u8().ok()?;
        let len = usize::try_from(reader.lenenc().ok()?).ok()?;
        let value = reader.bytes(len).ok()?;
        if field_type == optional_field::COLUMN_NAME {
            let mut names = ByteReader::new(value);
            for position in 0.. {
                let len = usize::try_from(names.lenenc().ok()?).ok()?;
                let name = names.bytes(len).ok()?;
                if position == index {
                    return Some(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
    }
    None
}

/// ENUM/SET member names decoded from their charset (utf8 and unknown: lossy UTF-8).
fn member_names(values: &[Vec<u8>], encoding: &TextEncoding) -> Arc<[String]> {
    values
        .iter()
        .map(|bytes| match encoding {
            TextEncoding::Latin1 => decode_latin1(bytes),
            _ => String::from_utf8_lossy(bytes).into_owned(),
        })
        .collect()
}

fn parse_collation_list(value: &[u8]) -> Result<Vec<u16>, String> {
    let mut reader = ByteReader::new(value);
    let mut ids = Vec::new();
    while !reader.rest().is_empty() {
        ids.push(collation_id(reader.lenenc()?)?);
    }
    Ok(ids)
}

fn collation_id(value: u64) -> Result<u16, String> {
    u16::try_from(value).map_err(|_| format!("collation id {value} out of range"))
}

/// DEFAULT_CHARSET: the default collation, then `(column index, collation)` pairs for the
/// columns that differ, the index counting only columns of the kind the field covers.
fn expand_default_charset(value: &[u8], count: usize) -> Result<Vec<u16>, String> {
    let mut reader = ByteReader::new(value);
    let default = collation_id(reader.lenenc()?)?;
    let mut ids = vec![default; count];
    while !reader.rest().is_empty() {
        let index = reader.lenenc()?;
        let id = collation_id(reader.lenenc()?)?;
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| ids.get_mut(i))
            .ok_or_else(|| format!("charset metadata names column {index} of {count}"))?;
        *slot = id;
    }
    Ok(ids)
}

fn parse_string_lists(value: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut reader = ByteReader::new(value);
    let mut lists = Vec::new();
    while !reader.rest().is_empty() {
        let count = reader.lenenc()?;
        let mut members = Vec::new();
        for _ in 0..count {
            let len = usize::try_from(reader.lenenc()?).map_err(|_| "length overflows")?;
            members.push(reader.bytes(len)?.to_vec());
        }
        lists.push(members);
    }
    Ok(lists)
}

fn parse_optional_metadata(
    data: &[u8],
    columns: &[RawColumn],
    flavor: Flavor,
) -> Result<OptionalMetadata, String> {
    let mut result = OptionalMetadata::default();
    let character_count = columns
        .iter()
        .filter(|c| is_character(c.real_type, flavor))
        .count();
    let enum_set_count = columns
        .iter()
        .filter(|c| is_enum_or_set(c.real_type))
        .count();
    let mut reader = ByteReader::new(data);
    while !reader.rest().is_empty() {
        let field_type = reader.u8()?;
        let len = usize::try_from(reader.lenenc()?).map_err(|_| "length overflows")?;
        let value = reader.bytes(len)?;
        match field_type {
            optional_field::SIGNEDNESS => {
                // Most significant bit first, one bit per numeric column.
                let flags = value
                    .iter()
                    .flat_map(|byte| (0..8).rev().map(move |bit| byte & (1 << bit) != 0))
                    .collect();
                result.unsigned_flags = Some(flags);
            }
            optional_field::DEFAULT_CHARSET => {
                result.charsets = Some(expand_default_charset(value, character_count)?);
            }
            optional_field::COLUMN_CHARSET => {
                result.charsets = Some(parse_collation_list(value)?);
            }
            optional_field::ENUM_AND_SET_DEFAULT_CHARSET => {
                result.enum_set_charsets = Some(expand_default_charset(value, enum_set_count)?);
            }
            optional_field::ENUM_AND_SET_COLUMN_CHARSET => {
                result.enum_set_charsets = Some(parse_collation_list(value)?);
            }
            optional_field::COLUMN_NAME => {
                let mut names_reader = ByteReader::new(value);
                let mut names = Vec::with_capacity(columns.len());
                while !names_reader.rest().is_empty() {
                    let len =
                        usize::try_from(names_reader.lenenc()?).map_err(|_| "length overflows")?;
                    names.push(String::from_utf8_lossy(names_reader.bytes(len)?).into_owned());
                }
                result.names = Some(names);
            }
            optional_field::SET_STR_VALUE => result.set_values = Some(parse_string_lists(value)?),
            optional_field::ENUM_STR_VALUE => result.enum_values = Some(parse_string_lists(value)?),
            // Geometry types, primary keys, visibility, vector dimensions and fields added
            // by later servers do not change how values decode.
            _ => {}
        }
    }
    Ok(result)
}
