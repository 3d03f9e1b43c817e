//! The outbox table's DDL per preset.
//!
//! * The event id is `CHAR(36) CHARACTER SET ascii`: the UUID's text form, which is what
//!   the relay sends as header `id`, and for UUIDv7 sorts by creation time, so the
//!   primary key grows at its end.
//! * The timestamp column is `DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)` and indexed:
//!   the relay reads it for the Kafka timestamp, and the cleanup job
//!   ([`crate::delete_published_events`]) deletes by it in index order.
//! * The payload is `JSON` (checked by the server; on MariaDB an alias of `LONGTEXT` with a
//!   `JSON_VALID` check), so a malformed payload is refused at commit time, not in the relay.
//!
//! # `BLACKHOLE` and partitioned tables
//! The relay reads the binlog, never the table, so an outbox table may be created
//! `ENGINE=BLACKHOLE`: rows are written to the binlog (with `binlog_format=ROW`) but not
//! stored, so no cleanup job is needed, and the primary key does not catch a repeated event
//! id (consumers still deduplicate by `id`). Replace `ENGINE=InnoDB` in the generated DDL.
//! Check on your server version that a transaction mixing the InnoDB business tables and the
//! BLACKHOLE outbox is logged as one transaction (the relay needs nothing more); the
//! contract tests of this crate run against InnoDB only.
//! A table partitioned by `RANGE` on the timestamp column can be cleaned by dropping whole
//! partitions instead of deleting rows (cheaper for large volumes): every unique key must
//! then include the partition column, so the primary key becomes
//! `(event_id, created_at)`, and a partition may only be dropped once the relay's checkpoint
//! timestamp is past its upper bound plus the safety margin (the same rule as
//! [`crate::delete_published_events`]).

use outbox_router::ColumnPreset;

use crate::table::{quote, OutboxTable};

/// SQL type of header columns (nullable: NULL sends no header).
pub const DDL_HEADER_COLUMN_TYPE: &str = "VARCHAR(255) NULL";

/// SQL type of the trace context column (a `traceparent` is 55 characters; W3C allows
/// longer future versions).
pub const DDL_TRACE_CONTEXT_COLUMN_TYPE: &str = "VARCHAR(512) NULL";

/// `CREATE TABLE IF NOT EXISTS` for `table` (InnoDB, utf8mb4), with its header and trace
/// context columns, the primary key on the event id and the cleanup index on the timestamp
/// column. The files in `migrations/` are this function's output for a table named
/// `outbox` in the default database (a test keeps them equal).
pub fn create_table_sql(table: &OutboxTable) -> String {
    let mapping = table.columns();
    let index_name = match table.preset() {
        ColumnPreset::Seeds => "outbox_created_at_idx",
        ColumnPreset::Debezium => "outbox_timestamp_idx",
    };
    let mut lines = vec![
        format!(
            "  {} CHAR(36) CHARACTER SET ascii NOT NULL",
            quote(&mapping.event_id)
        ),
        format!("  {} VARCHAR(255) NOT NULL", quote(&mapping.aggregate_type)),
        format!("  {} VARCHAR(255) NOT NULL", quote(&mapping.aggregate_id)),
        format!("  {} VARCHAR(255) NOT NULL", quote(&mapping.event_type)),
        format!("  {} JSON NOT NULL", quote(&mapping.payload)),
        format!(
            "  {} DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
            quote(&mapping.timestamp)
        ),
    ];
    for column in table.header_columns() {
        lines.push(format!("  {} {DDL_HEADER_COLUMN_TYPE}", quote(column)));
    }
    if let Some(column) = table.trace_context_column() {
        lines.push(format!(
            "  {} {DDL_TRACE_CONTEXT_COLUMN_TYPE}",
            quote(column)
        ));
    }
    lines.push(format!("  PRIMARY KEY ({})", quote(&mapping.event_id)));
    lines.push(format!(
        "  KEY {} ({})",
        quote(index_name),
        quote(&mapping.timestamp)
    ));
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;\n",
        table.quoted_name(),
        lines.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped migration files are the function's output (they cannot drift apart).
    #[test]
    fn migration_files_match_the_function() {
        for (preset, file) in [
            (
                ColumnPreset::Seeds,
                include_str!("../migrations/0001_outbox_seeds.sql"),
            ),
            (
                ColumnPreset::Debezium,
                include_str!("../migrations/0001_outbox_debezium.sql"),
            ),
        ] {
            let table = OutboxTable::new("outbox", preset).unwrap();
            let generated = create_table_sql(&table);
            let without_comments: String = file
                .lines()
                .filter(|line| !line.starts_with("--"))
                .map(|line| format!("{line}\n"))
                .collect();
            assert_eq!(
                without_comments, generated,
                "migration file of preset {preset}"
            );
        }
    }
}
