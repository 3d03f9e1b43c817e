//! Columns looked up from `information_schema.COLUMNS` for TABLE_MAPs without names
//! (binlog_row_metadata=MINIMAL), and the check that the binlog's column types fit them.
//!
//! The lookup describes the table as it is *now*; the event may be older. The caller makes
//! sure no DDL on the table lies between the event and the lookup (`live.rs`, forward scan);
//! this check is the second, independent guard: a column whose binlog type cannot be the
//! looked-up type means the definitions differ, so names would be mis-mapped.

use super::table_map::column_type as ct;

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LookedUpColumn {
    /// `COLUMN_NAME`: the name rows get for this position.
    pub(crate) name: String,
    /// `DATA_TYPE` (`int`, `varchar`, ...), for error messages.
    pub(crate) data_type: String,
    /// The binlog types `data_type` can appear as, computed once per lookup (every
    /// TABLE_MAP using the names is checked against it).
    family: TypeFamily,
}

impl LookedUpColumn {
    /// A column named `name` whose `information_schema.COLUMNS.DATA_TYPE` is `data_type`.
    pub(crate) fn new(name: String, data_type: String) -> LookedUpColumn {
        LookedUpColumn {
            family: TypeFamily::of_data_type(&data_type),
            name,
            data_type,
        }
    }
}

/// Which binlog column types a looked-up `DATA_TYPE` can appear as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeFamily {
    /// A fixed-width integer type, by its binlog type code.
    Exact(u8),
    /// FLOAT.
    Float,
    /// DOUBLE / REAL.
    Double,
    /// DATETIME (old or fractional format).
    DateTime,
    /// TIMESTAMP (old or fractional format).
    Timestamp,
    /// TIME (old or fractional format).
    Time,
    /// DATE.
    Date,
    /// CHAR, VARCHAR, BINARY, VARBINARY (which of them the binlog writes depends on the
    /// server and the column width, so they are not told apart).
    ShortString,
    /// TINYTEXT .. LONGTEXT, TINYBLOB .. LONGBLOB (MariaDB's JSON is a LONGTEXT).
    Blob,
    /// JSON: MySQL's binary JSON, or a LONGTEXT on MariaDB (where JSON is an alias).
    Json,
    /// Any spatial type.
    Geometry,
    /// A type this check does not know (a plugin type such as MariaDB's INET6 or UUID):
    /// accepted, the forward scan still guards it.
    Unknown,
}

impl TypeFamily {
    /// The family of an `information_schema.COLUMNS.DATA_TYPE` value.
    pub(crate) fn of_data_type(data_type: &str) -> TypeFamily {
        match data_type.to_ascii_lowercase().as_str() {
            "tinyint" | "bool" | "boolean" => TypeFamily::Exact(ct::TINY),
            "smallint" => TypeFamily::Exact(ct::SHORT),
            "mediumint" => TypeFamily::Exact(ct::INT24),
            "int" | "integer" => TypeFamily::Exact(ct::LONG),
            "bigint" => TypeFamily::Exact(ct::LONGLONG),
            "decimal" | "numeric" => TypeFamily::Exact(ct::NEWDECIMAL),
            "year" => TypeFamily::Exact(ct::YEAR),
            "bit" => TypeFamily::Exact(ct::BIT),
            "enum" => TypeFamily::Exact(ct::ENUM),
            "set" => TypeFamily::Exact(ct::SET),
            "json" => TypeFamily::Json,
            "vector" => TypeFamily::Unknown, // MySQL 9 logs 242, MariaDB 11.7 a VARBINARY
            "float" => TypeFamily::Float,
            "double" | "real" | "double precision" => TypeFamily::Double,
            "datetime" => TypeFamily::DateTime,
            "timestamp" => TypeFamily::Timestamp,
            "time" => TypeFamily::Time,
            "date" => TypeFamily::Date,
            "char" | "varchar" | "binary" | "varbinary" => TypeFamily::ShortString,
            "tinytext" | "text" | "mediumtext" | "longtext" | "tinyblob" | "blob"
            | "mediumblob" | "longblob" => TypeFamily::Blob,
            "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
            | "multipolygon" | "geometrycollection" | "geomcollection" => TypeFamily::Geometry,
            _ => TypeFamily::Unknown,
        }
    }

    /// True when a column of this family can be logged with binlog type `type_code` (the
    /// real type, ENUM/SET/STRING resolved from a STRING column's metadata).
    pub(crate) fn accepts(self, type_code: u8) -> bool {
        match self {
            TypeFamily::Exact(code) => code == type_code,
            TypeFamily::Float => type_code == ct::FLOAT,
            TypeFamily::Double => type_code == ct::DOUBLE,
            TypeFamily::DateTime => matches!(type_code, ct::DATETIME | ct::DATETIME2),
            TypeFamily::Timestamp => matches!(type_code, ct::TIMESTAMP | ct::TIMESTAMP2),
            TypeFamily::Time => matches!(type_code, ct::TIME | ct::TIME2),
            TypeFamily::Date => matches!(type_code, ct::DATE | ct::NEWDATE),
            TypeFamily::ShortString => {
                matches!(type_code, ct::VARCHAR | ct::VAR_STRING | ct::STRING)
            }
            TypeFamily::Blob => matches!(
                type_code,
                ct::BLOB | ct::TINY_BLOB | ct::MEDIUM_BLOB | ct::LONG_BLOB
            ),
            TypeFamily::Json => type_code == ct::JSON || TypeFamily::Blob.accepts(type_code),
            TypeFamily::Geometry => type_code == ct::GEOMETRY,
            TypeFamily::Unknown => true,
        }
    }
}

/// The first column whose binlog type cannot be its looked-up type, as an error reason;
/// `None` when every column fits. `type_codes` and `columns` have the same length (the
/// caller checked the count first).
pub(crate) fn type_mismatch(columns: &[LookedUpColumn], type_codes: &[u8]) -> Option<String> {
    columns
        .iter()
        .zip(type_codes)
        .enumerate()
        .find(|(_, (column, code))| !column.family.accepts(**code))
        .map(|(index, (column, code))| {
            format!(
                "column {} is `{}` {} in information_schema now, but the event logs type code \
                 {code}: the table was altered after this event was written, so the looked-up \
                 names may not be this event's; set binlog_row_metadata=FULL on the server so \
                 events carry their own column names",
                index + 1,
                column.name,
                column.data_type.to_ascii_uppercase()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, data_type: &str) -> LookedUpColumn {
        LookedUpColumn::new(name.into(), data_type.into())
    }

    #[test]
    fn binlog_types_fit_their_information_schema_types() {
        let columns = [
            column("id", "bigint"),
            column("payload", "longtext"),
            column("kind", "enum"),
            column("at", "datetime"),
            column("code", "char"),
            column("ip", "inet6"),
        ];
        let codes = [
            ct::LONGLONG,
            ct::BLOB,
            ct::ENUM,
            ct::DATETIME2,
            ct::STRING,
            ct::STRING,
        ];
        assert_eq!(type_mismatch(&columns, &codes), None);
    }

    #[test]
    fn a_changed_type_is_named_with_the_fix() {
        let columns = [
            column("id", "int"),
            column("b", "int"),
            column("a", "varchar"),
        ];
        let codes = [ct::LONG, ct::VARCHAR, ct::VARCHAR];
        let reason = type_mismatch(&columns, &codes).expect("a mismatch");
        assert!(reason.contains("column 2 is `b` INT"), "{reason}");
        assert!(reason.contains("type code 15"), "{reason}");
        assert!(reason.contains("binlog_row_metadata=FULL"), "{reason}");
        // Integer widths are told apart.
        assert!(type_mismatch(&[column("n", "smallint")], &[ct::LONG]).is_some());
    }
}
