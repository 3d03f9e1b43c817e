//! The data model of the transaction stream: positions, GTIDs, typed values, rows,
//! and the items the reader yields. Every other crate of the workspace speaks these types.

use std::fmt;
use std::sync::Arc;

use crate::gtid::Gtid;

/// Which server family wrote the binlog. Decides GTID format, the dump command and
/// which event type codes exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// Oracle MySQL 5.7 / 8.x / 9.x (and Percona).
    Mysql,
    /// MariaDB 10.5 and later.
    Mariadb,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::Mysql => "mysql",
            Flavor::Mariadb => "mariadb",
        })
    }
}

/// A place in the binary log: a file name and a byte offset inside it.
///
/// Positions handed out by the reader always point just **after** a committed transaction
/// (or are heartbeat positions, which the server only sends between transactions), so
/// starting a new stream at one never splits a transaction.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct BinlogPosition {
    /// Binlog file name as the server names it, e.g. `mysql-bin.000042`.
    pub file: String,
    /// Byte offset inside `file`.
    pub position: u64,
}

impl BinlogPosition {
    /// Builds a position from its two parts.
    pub fn new(file: impl Into<String>, position: u64) -> Self {
        Self {
            file: file.into(),
            position,
        }
    }
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.position)
    }
}

/// Fully qualified name of a table: `database.table`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct TableName {
    /// Schema (database) name.
    pub database: String,
    /// Table name inside `database`.
    pub table: String,
}

impl TableName {
    /// Builds a table name from its two parts.
    pub fn new(database: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            database: database.into(),
            table: table.into(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.database, self.table)
    }
}

impl std::str::FromStr for TableName {
    type Err = String;

    /// Parses `database.table`; both parts must be non-empty and there must be exactly one dot.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('.') {
            Some((db, table)) if !db.is_empty() && !table.is_empty() && !table.contains('.') => {
                Ok(TableName::new(db, table))
            }
            _ => Err(format!(
                "`{s}` is not a table name of the form `database.table`"
            )),
        }
    }
}

/// A calendar date and wall-clock time with microseconds, as MySQL's `DATETIME`/`DATE`/`TIME`
/// store it (no time zone). `TIME` values use `year = month = day = 0` and may be negative
/// or exceed 24 hours, so they have their own variant in [`Value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DateTime {
    /// Year (0 for the zero date).
    pub year: u16,
    /// Month 1-12 (0 for the zero date).
    pub month: u8,
    /// Day 1-31 (0 for the zero date).
    pub day: u8,
    /// Hour 0-23.
    pub hour: u8,
    /// Minute 0-59.
    pub minute: u8,
    /// Second 0-59.
    pub second: u8,
    /// Microseconds 0-999999.
    pub micros: u32,
}

/// One column value of a row image, typed for the router.
///
/// Text is decoded from its column charset to UTF-8; bytes that are not valid in that
/// charset are kept in [`Value::UndecodableText`] so the router can name the problem
/// instead of guessing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Signed integer types (TINYINT..BIGINT, YEAR).
    Int(i64),
    /// Unsigned integer types (including BIGINT UNSIGNED, BIT up to 64 bits).
    UInt(u64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// DECIMAL, as its exact decimal string (e.g. `"-12.3400"`).
    Decimal(String),
    /// A text column (CHAR, VARCHAR, TEXT, ENUM/SET by name, MariaDB JSON), decoded to UTF-8.
    Text(String),
    /// A text column whose bytes are not valid in its charset. The raw bytes are kept.
    UndecodableText {
        /// The raw column bytes.
        bytes: Vec<u8>,
        /// The charset (collation) the column declared, as a name or numeric collation id.
        charset: String,
    },
    /// A binary column (BINARY, VARBINARY, BLOB), byte-exact.
    Bytes(Vec<u8>),
    /// A MySQL `JSON` column: its binary JSON written as JSON text in Debezium's form
    /// (MySQL's storage key order, see [`JsonText`]).
    Json(JsonText),
    /// A MySQL 9 `VECTOR` column: its 32-bit floats in order. Lossless: the stored bytes are
    /// these floats little-endian ([`Value::vector_bytes`]), bit patterns kept.
    Vector(Vec<f32>),
    /// DATETIME (no time zone).
    DateTime(DateTime),
    /// DATE (time fields are zero).
    Date(DateTime),
    /// TIME: a signed duration.
    Time {
        /// True for a negative duration.
        negative: bool,
        /// Whole hours (may exceed 23).
        hours: u32,
        /// Minutes 0-59.
        minutes: u8,
        /// Seconds 0-59.
        seconds: u8,
        /// Microseconds 0-999999.
        micros: u32,
    },
    /// TIMESTAMP: a point in time, seconds and microseconds since the Unix epoch (UTC).
    Timestamp {
        /// Seconds since 1970-01-01T00:00:00Z.
        unix_seconds: i64,
        /// Microseconds 0-999999.
        micros: u32,
    },
}

impl Value {
    /// The bytes MySQL stores for a [`Value::Vector`]: each float little-endian, in order.
    pub fn vector_bytes(floats: &[f32]) -> Vec<u8> {
        floats
            .iter()
            .flat_map(|float| float.to_le_bytes())
            .collect()
    }
}

/// The JSON text of a MySQL `JSON` column value, as Debezium's MySQL connector writes the
/// binary JSON (`crates/binlog/src/decoder/json.rs` has the rules): object members in
/// MySQL's storage order, DECIMALs as bare numbers, dates and times as strings without a
/// zero fraction, doubles as Java prints them, other opaque values as Base64 strings.
///
/// The text is kept as written, so whoever renders it (a record value, an expanded payload)
/// sees the members in their source order. It serializes as the JSON document it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonText(String);

impl JsonText {
    /// Wraps JSON text that is already in the wanted form (the decoder's output, or a test's).
    /// The text is not checked.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The text parsed as a JSON document (`serde_json` sorts object keys; numbers keep
    /// their digits).
    pub fn document(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A document's compact JSON text (`serde_json`'s form: keys sorted), for values built in
/// code rather than decoded from a binlog.
impl From<serde_json::Value> for JsonText {
    fn from(document: serde_json::Value) -> Self {
        Self(document.to_string())
    }
}

impl serde::Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        self.document()
            .map_err(S::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Self::from)
    }
}

/// Column names of a table, shared by every row of that table (cheap to clone).
pub type ColumnNames = Arc<[String]>;

/// A column's SQL type as the server describes it in the binlog's TABLE_MAP (or a query's
/// result columns): what Debezium derives a column's Kafka Connect schema from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    /// TINYINT (1 byte), SMALLINT (2), MEDIUMINT (3), INT (4), BIGINT (8).
    Integer {
        /// 1, 2, 3, 4 or 8.
        bytes: u8,
        /// UNSIGNED (from the SIGNEDNESS metadata; signed when the server does not say).
        unsigned: bool,
    },
    /// FLOAT.
    Float,
    /// DOUBLE.
    Double,
    /// DECIMAL(precision, scale).
    Decimal {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// YEAR.
    Year,
    /// DATE.
    Date,
    /// TIME(fsp).
    Time {
        /// Fractional second digits, 0-6.
        fsp: u8,
    },
    /// DATETIME(fsp).
    DateTime {
        /// Fractional second digits, 0-6.
        fsp: u8,
    },
    /// TIMESTAMP(fsp).
    Timestamp {
        /// Fractional second digits, 0-6.
        fsp: u8,
    },
    /// CHAR, VARCHAR, TEXT, ENUM, SET (a character set; MariaDB's JSON is LONGTEXT).
    Text,
    /// BINARY, VARBINARY, BLOB (the `binary` character set).
    Binary,
    /// MySQL's JSON.
    Json,
    /// BIT(n).
    Bit {
        /// n, 1 to 64.
        length: u16,
    },
    /// What the server did not say enough about (a string column without charset
    /// metadata), or a type Debezium has no outbox form for (GEOMETRY, VECTOR, NULL).
    Unknown,
}

impl SqlType {
    /// The type an `information_schema.COLUMNS.COLUMN_TYPE` text names (`int(10) unsigned`,
    /// `decimal(20,10)`, `datetime(6)`, `varbinary(16)`, `enum('a','b')`), as the binlog's
    /// TABLE_MAP would describe the column; [`SqlType::Unknown`] for what it does not know.
    /// MariaDB's JSON is `longtext` there too ([`SqlType::Text`]).
    pub fn from_column_type(column_type: &str) -> SqlType {
        let lower = column_type.trim().to_ascii_lowercase();
        let (name, argument, rest) = match lower.split_once('(') {
            Some((name, inner)) => match inner.split_once(')') {
                Some((argument, rest)) => (name.trim(), argument.trim(), rest),
                None => return SqlType::Unknown,
            },
            None => match lower.split_once(char::is_whitespace) {
                Some((name, rest)) => (name, "", rest),
                None => (lower.as_str(), "", ""),
            },
        };
        let unsigned = rest.split_whitespace().any(|word| word == "unsigned");
        let integer = |bytes: u8| SqlType::Integer { bytes, unsigned };
        let fsp = || argument.parse::<u8>().map_or(0, |fsp| fsp.min(6));
        match name {
            "tinyint" | "bool" | "boolean" => integer(1),
            "smallint" => integer(2),
            "mediumint" => integer(3),
            "int" | "integer" => integer(4),
            "bigint" => integer(8),
            "float" => SqlType::Float,
            "double" | "real" => SqlType::Double,
            "decimal" | "numeric" | "dec" | "fixed" => {
                let (precision, scale) = argument.split_once(',').unwrap_or((argument, "0"));
                match (precision.trim().parse(), scale.trim().parse()) {
                    (Ok(precision), Ok(scale)) => SqlType::Decimal { precision, scale },
                    _ if argument.is_empty() => SqlType::Decimal {
                        precision: 10,
                        scale: 0,
                    },
                    _ => SqlType::Unknown,
                }
            }
            "year" => SqlType::Year,
            "date" => SqlType::Date,
            "time" => SqlType::Time { fsp: fsp() },
            "datetime" => SqlType::DateTime { fsp: fsp() },
            "timestamp" => SqlType::Timestamp { fsp: fsp() },
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum"
            | "set" => SqlType::Text,
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                SqlType::Binary
            }
            "json" => SqlType::Json,
            "bit" => SqlType::Bit {
                length: argument.parse().unwrap_or(1),
            },
            _ => SqlType::Unknown,
        }
    }
}

/// One column's type and nullability, as the server describes the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ColumnType {
    /// The SQL type.
    pub sql_type: SqlType,
    /// The column may hold NULL (TABLE_MAP's null bitmap; a Connect schema's `optional`).
    pub nullable: bool,
}

#[cfg(test)]
mod column_type_text_tests {
    use super::SqlType;

    #[test]
    fn information_schema_column_types_read_as_the_binlog_describes_them() {
        for (text, expected) in [
            (
                "int(10) unsigned",
                SqlType::Integer {
                    bytes: 4,
                    unsigned: true,
                },
            ),
            (
                "tinyint(1)",
                SqlType::Integer {
                    bytes: 1,
                    unsigned: false,
                },
            ),
            (
                "bigint",
                SqlType::Integer {
                    bytes: 8,
                    unsigned: false,
                },
            ),
            (
                "decimal(20,10)",
                SqlType::Decimal {
                    precision: 20,
                    scale: 10,
                },
            ),
            ("datetime(6)", SqlType::DateTime { fsp: 6 }),
            ("timestamp", SqlType::Timestamp { fsp: 0 }),
            ("varchar(16)", SqlType::Text),
            ("enum('a','b c')", SqlType::Text),
            ("longtext", SqlType::Text),
            ("varbinary(16)", SqlType::Binary),
            ("json", SqlType::Json),
            ("double", SqlType::Double),
            ("bit(3)", SqlType::Bit { length: 3 }),
            ("bit", SqlType::Bit { length: 1 }),
            ("geometry", SqlType::Unknown),
            ("uuid", SqlType::Unknown),
        ] {
            assert_eq!(SqlType::from_column_type(text), expected, "{text}");
        }
    }
}

/// The column types of a row image, in its column order (cheap to clone).
pub type ColumnTypes = Arc<[ColumnType]>;

/// One row image: values in table column order, with the shared column names.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Column names, in table order; `values[i]` belongs to `columns[i]`.
    pub columns: ColumnNames,
    /// Column values. With `binlog_row_image=FULL` every column is present.
    pub values: Vec<Value>,
    /// The columns' types as the server describes them (`types[i]` belongs to
    /// `columns[i]`); `None` for rows that come with no description (built by hand).
    pub types: Option<ColumnTypes>,
}

impl Row {
    /// The type of the column at `index`, when the row carries its columns' types.
    pub fn column_type(&self, index: usize) -> Option<ColumnType> {
        self.types
            .as_ref()
            .and_then(|types| types.get(index).copied())
    }

    /// The value of the column called `name` (exact, case-sensitive match), if the table has one.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| self.values.get(i))
    }
}

/// What a row event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowOperation {
    /// WRITE_ROWS: `after` is set.
    Insert,
    /// UPDATE_ROWS: `before` and `after` are set.
    Update,
    /// DELETE_ROWS: `before` is set.
    Delete,
}

/// One changed row of a watched table, inside a transaction that has not ended yet.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange {
    /// The table the row belongs to.
    pub table: Arc<TableName>,
    /// Insert, update or delete.
    pub operation: RowOperation,
    /// Row image before the change (update, delete).
    pub before: Option<Row>,
    /// Row image after the change (insert, update).
    pub after: Option<Row>,
    /// Timestamp of the rows event header (seconds since the epoch, server clock).
    pub event_timestamp: u32,
    /// Where the rows event that carried this row starts (for diagnostics, not for resuming).
    pub event_position: BinlogPosition,
    /// The GTID of the transaction this row belongs to, when the server assigned one (the
    /// GTID event opens the transaction, so it is known before the commit; shared by the
    /// transaction's rows). For diagnostics such as dead letters; resume by [`Commit`]s.
    pub transaction_gtid: Option<Arc<Gtid>>,
    /// True for a row of a two-phase XA transaction (`XA START` ... `XA END`): its
    /// [`Commit`] is normally an `XA PREPARE` ([`XaBoundary::Prepare`]), and whether the row
    /// is committed only comes with a later [`XaBoundary::Commit`] or
    /// [`XaBoundary::Rollback`]; a one-phase XA commit ends it with an ordinary `Commit`.
    pub in_xa_transaction: bool,
}

/// What a [`Commit`] of a two-phase XA transaction is (`None` in [`Commit::xa`] for every
/// ordinary transaction, and for `XA COMMIT ... ONE PHASE`). The XID is in one canonical
/// form, `X'<gtrid hex>',X'<bqual hex>',<format id>`, so a prepare and its outcome match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XaBoundary {
    /// `XA PREPARE`: the transaction's rows (those before this `Commit`) are prepared,
    /// not committed; the outcome comes with a later `Commit` naming the same XID.
    Prepare {
        /// The transaction's XID.
        xid: String,
    },
    /// `XA COMMIT` of a prepared transaction: its rows are committed now.
    Commit {
        /// The transaction's XID.
        xid: String,
    },
    /// `XA ROLLBACK` of a prepared transaction: its rows never happened.
    Rollback {
        /// The transaction's XID.
        xid: String,
    },
}

/// The end of a committed transaction. All [`RowChange`]s yielded since the previous
/// `Commit` belong to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    /// Position just after the commit event (XID, or COMMIT/DDL query): resuming here starts
    /// with the next transaction.
    pub position: BinlogPosition,
    /// The transaction's GTID, when the server assigned one.
    pub gtid: Option<Gtid>,
    /// Timestamp of the commit event header (seconds since the epoch, server clock).
    pub timestamp: u32,
    /// Number of watched rows yielded for this transaction (0 when it touched none).
    pub row_count: u64,
    /// For two-phase XA: whether this is the prepare or the outcome of an XA transaction
    /// (see [`XaBoundary`]); `None` for every ordinary transaction.
    pub xa: Option<XaBoundary>,
}

/// A server heartbeat: the server is alive and has nothing newer than `position`.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    /// The position the server reports; always between transactions.
    pub position: BinlogPosition,
}

/// One item of the transaction stream, in binlog order.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A changed row of a watched table. More rows of the same transaction may follow.
    Row(RowChange),
    /// The transaction the preceding rows belong to committed.
    Commit(Commit),
    /// The server is idle at this position (no transaction is open).
    Heartbeat(Heartbeat),
}

/// Which tables' rows the reader decodes and yields. Rows of other tables are skipped
/// before any value is decoded, so they cost little.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableFilter {
    /// The watched tables; ignored when `all` is set.
    tables: std::collections::HashSet<TableName>,
    /// Watch every table (used by `inspect` without a config).
    all: bool,
}

impl TableFilter {
    /// Watch exactly these tables.
    pub fn tables(tables: impl IntoIterator<Item = TableName>) -> Self {
        Self {
            tables: tables.into_iter().collect(),
            all: false,
        }
    }

    /// Watch every table.
    pub fn all() -> Self {
        Self {
            tables: Default::default(),
            all: true,
        }
    }

    /// True when rows of `database.table` are wanted.
    pub fn matches(&self, database: &str, table: &str) -> bool {
        self.all
            || self
                .tables
                .iter()
                .any(|t| t.database == database && t.table == table)
    }

    /// The explicitly watched tables (empty when watching all).
    pub fn watched(&self) -> impl Iterator<Item = &TableName> {
        self.tables.iter()
    }
}
